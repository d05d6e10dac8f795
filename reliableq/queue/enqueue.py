"""The INSERTs that make jobs: one job, a batch (each bounded by the submitter's unfinished jobs when
a user submits), many of one kind; and the wake-up of a queue's idle workers on commit.

The rules (what a valid job is, budgets, keys) are the caller's (reliableq.services); these
statements only store what they are given, with time from the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import db
from .sql import JOB, S

CHANNEL = "reliableq"
# The payload is the queue; run_at in the future needs no wake-up now (workers poll).
NOTIFY_SQL = f"CASE WHEN inserted.run_at <= now() THEN pg_notify('{CHANNEL}', inserted.queue) END"

_INSERT_COLUMNS = """id, kind, queue, priority, payload, status, attempts, max_attempts, run_at, worker_id,
                   last_error, dedupe_key, dedupe_scope, submitted_by, concurrency_key, unique_key,
                   trace_context, created_at, updated_at"""
_SUBMIT_SQL = f"""
    WITH inserted AS (
        INSERT INTO {JOB} ({_INSERT_COLUMNS})
        VALUES (%s, %s, %s, %s, %s::jsonb, {S.PENDING}, 0, %s, GREATEST(COALESCE(%s, now()), now()),
                '', '', %s, %s, %s, %s, %s, %s::jsonb, now(), now())
        ON CONFLICT DO NOTHING
        RETURNING run_at, created_at, updated_at, queue
    )
    -- Wakes idle workers of this queue when (and only if) the transaction commits.
    SELECT run_at, created_at, updated_at, {NOTIFY_SQL} FROM inserted
"""
# The submitter's unfinished jobs, counted up to the bound through reliableq_job_submitter_open (its
# predicate written out, so that the planner can use the partial index).
_HELD_SQL = f"""
    SELECT count(*) AS n FROM (
        SELECT 1 FROM {JOB}
         WHERE dedupe_scope = %s AND dedupe_scope <> '' AND status IN ({S.PENDING}, {S.RUNNING})
         LIMIT %s
    ) held
"""
# The same INSERT, made only while the submitter holds fewer unfinished jobs than its bound. One
# statement: no round trip more than an unbounded submission. Concurrent submissions of one user
# each count in their own snapshot, so the bound can be passed by the requests in flight at once.
_BOUNDED_SUBMIT_SQL = f"""
    WITH held AS MATERIALIZED ({_HELD_SQL}),
    inserted AS (
        INSERT INTO {JOB} ({_INSERT_COLUMNS})
        SELECT %s::uuid, %s, %s, %s::int, %s::jsonb, {S.PENDING}, 0, %s::int,
               GREATEST(COALESCE(%s::timestamptz, now()), now()), '', '', %s, %s, %s, %s, %s, %s::jsonb, now(), now()
         WHERE (SELECT n FROM held) < %s
        ON CONFLICT DO NOTHING
        RETURNING run_at, created_at, updated_at, queue
    )
    SELECT inserted.run_at, inserted.created_at, inserted.updated_at, {NOTIFY_SQL}, (SELECT n FROM held)
      FROM (SELECT 1) AS one LEFT JOIN inserted ON true
"""


# One row comes back, not one per job: the transaction's time (every job's created_at, and the
# run_at of every job due now), the run_at of the few scheduled later, and (bounded) the count the
# bound was checked against. The first job carries the batch's Idempotency-Key, if any.
def _submit_many_sql(held: str) -> str:
    """The batch INSERT, counting the submitter's unfinished jobs with `held` (a query of one row, n)."""
    return f"""
    WITH held AS MATERIALIZED ({held}),
    inserted AS (
        INSERT INTO {JOB} (id, kind, queue, priority, payload, status, attempts, max_attempts,
                           run_at, worker_id, last_error, dedupe_key, dedupe_scope, submitted_by, concurrency_key,
                           trace_context, created_at, updated_at)
        SELECT n.id, n.kind, n.queue, n.priority, n.payload::jsonb, {S.PENDING}, 0, n.budget,
               GREATEST(COALESCE(n.run_at, now()), now()), '', '',
               CASE WHEN n.ord = 1 THEN %s END, %s, %s, n.key, %s::jsonb, now(), now()
          FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::int[], %s::text[], %s::int[],
                      %s::timestamptz[], %s::text[]) WITH ORDINALITY
               AS n(id, kind, queue, priority, payload, budget, run_at, key, ord)
         WHERE (SELECT n FROM held) + %s <= %s
        ON CONFLICT DO NOTHING
        RETURNING id, run_at, queue
    ),
    woken AS (
        SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM inserted WHERE run_at <= now()) q
    )
    SELECT now(), count(*), array_agg(id) FILTER (WHERE run_at <> now()),
           array_agg(run_at) FILTER (WHERE run_at <> now()), (SELECT count(*) FROM woken), (SELECT n FROM held)
      FROM inserted
"""


_SUBMIT_MANY_BOUNDED = _submit_many_sql(_HELD_SQL)
_SUBMIT_MANY_UNBOUNDED = _submit_many_sql("SELECT 0 AS n")


def insert_one(params: Sequence[Any], *, scope: str, bound: int | None) -> tuple[Any, int | None]:
    """INSERT one job (`params`: its id, then the columns submit() gives). Returns (run_at, created_at,
    updated_at, notified) or None when a key's conflict left it out, and, bounded, the count of the
    submitter's unfinished jobs it checked (None unbounded)."""
    with db.cursor() as cursor:
        if bound is None:
            cursor.execute(_SUBMIT_SQL, list(params))
            return cursor.fetchone(), None
        cursor.execute(_BOUNDED_SUBMIT_SQL, [scope, bound, *params, bound])
        *row, held = cursor.fetchone()
        return (None if row[0] is None else row), held


def insert_many(columns: Sequence[Any], *, count: int, scope: str, bound: int | None) -> tuple[Any, ...]:
    """INSERT a batch (`columns` as submit_many gives them) in one statement: (now, stored, ids and run_ats
    of the jobs scheduled later, queues woken, the unfinished jobs counted)."""
    with db.cursor() as cursor:
        if bound is None:
            cursor.execute(_SUBMIT_MANY_UNBOUNDED, [*columns, count])
        else:
            cursor.execute(_SUBMIT_MANY_BOUNDED, [scope, bound, *columns, bound])
        return tuple(cursor.fetchone())


def insert_of_kind(
    *,
    kind: str,
    queue: str,
    priority: int,
    budget: int,
    concurrency_key: str | None = None,
    run_at: Any,
    trace_context: str | None,
    ids: Sequence[Any],
    payloads: Sequence[str],
) -> int:
    """INSERT many jobs of one kind in one statement, with one wake-up of the queue; return how many."""
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            WITH inserted AS (
                INSERT INTO {JOB} (id, kind, queue, priority, payload, status, attempts, max_attempts, run_at,
                                   worker_id, last_error, concurrency_key, trace_context, created_at, updated_at)
                SELECT new.id, %s, %s, %s, new.payload::jsonb, {S.PENDING}, 0, %s,
                       GREATEST(COALESCE(%s, now()), now()), '', '', %s, %s::jsonb, now(), now()
                  FROM unnest(%s::uuid[], %s::text[]) AS new(id, payload)
                RETURNING run_at, queue
            )
            -- One wake-up for the queue, delivered when (and only if) the transaction commits.
            SELECT count(*), CASE WHEN bool_or(run_at <= now()) THEN pg_notify('{CHANNEL}', %s) END FROM inserted
            """,
            (kind, queue, priority, budget, run_at, concurrency_key, trace_context, list(ids), list(payloads), queue),
        )
        (count, _) = cursor.fetchone()
    return int(count)


def notify(queue: str) -> None:
    """Wake the queue's idle workers once this transaction commits."""
    with db.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])
