"""Server-side functions the hot statements call: created by a migration, their plans kept by
PostgreSQL per server connection (a PL/pgSQL function's queries are planned once per session),
which holds through a transaction pooler, where the worker prepares nothing."""

from __future__ import annotations

from .sql import EDGE, JOB, RETURN_VALUE, S

UPSTREAM = "reliableq_upstream"

# A member's upstream members, each [name, the value its handler returned]: an index probe of the
# edges by target, then one primary-key probe per upstream member (OFFSET 0 keeps each a subquery of
# its own, so a fan-in of 10,000 reads 10,000 rows, never their square). A function, not a subquery
# of the claim: a claim of jobs of no workflow neither plans nor starts this query, where the
# subquery cost every claim 0.15 ms to plan and 0.15 ms to set up, through a pooler at every call.
UPSTREAM_CREATE = f"""
CREATE OR REPLACE FUNCTION {UPSTREAM}(member uuid) RETURNS json LANGUAGE plpgsql STABLE AS $reliableq$
BEGIN
    RETURN (
        SELECT json_agg(json_build_array(COALESCE(u.member_name, e.upstream::text), r.value))
          FROM {EDGE} e
         CROSS JOIN LATERAL (SELECT u.member_name FROM {JOB} u WHERE u.id = e.upstream OFFSET 0) u
          LEFT JOIN LATERAL (SELECT r.value FROM {RETURN_VALUE} r WHERE r.job_id = e.upstream OFFSET 0) r
            ON true
         WHERE e.target = member
    );
END
$reliableq$
"""
UPSTREAM_DROP = f"DROP FUNCTION IF EXISTS {UPSTREAM}(uuid)"

KEY_ROOM = "reliableq_key_room"

# How many more jobs of `of_kind` with `of_key` may start, for a claim that holds the key: it tries
# the key's lock (the kind's name and the key, hashed) without waiting, 0 if another claim holds it,
# then counts the key's RUNNING rows. VOLATILE, so that count runs in a snapshot of its own, taken
# after the lock: a claimer that filled the key and released its lock by committing is seen, though
# the claim calling this function took its own snapshot before. So a per-key claim is one statement.
KEY_ROOM_CREATE = f"""
CREATE OR REPLACE FUNCTION {KEY_ROOM}(of_kind text, of_key text, per_key int) RETURNS int
LANGUAGE plpgsql VOLATILE AS $reliableq$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('reliableq:key:' || of_kind), hashtext(of_key)) THEN
        RETURN 0;
    END IF;
    RETURN per_key - (SELECT count(*) FROM {JOB} r
                       WHERE r.status = {S.RUNNING} AND r.kind = of_kind AND r.concurrency_key = of_key)::int;
END
$reliableq$
"""
KEY_ROOM_DROP = f"DROP FUNCTION IF EXISTS {KEY_ROOM}(text, text, int)"
