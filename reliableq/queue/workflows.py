"""Workflows in SQL: storing one, and what a member's end does, in the statement that ends it.

A member waits (WAITING) until each of its upstream members has finished; what finished is
counted in WorkflowCount rows. Every member has an edge to each of its dependents and one to its
workflow; its end takes one off each target's count, in the shard its edge names. A target of
few upstreams has one count (shard -1); a target of many (a fan-in, a workflow of thousands) has
up to MAX_SHARDS shards, and its shard -1 counts the shards still above zero, so the members of a
fan-in finishing at once lock different rows, and only the last member of each shard touches the
total. The transaction whose decrement brings a total to zero is the one that decides: it makes
the member PENDING, or ends the workflow and enqueues its callbacks. Row locks serialize the
decrements of one row, and each UPDATE re-reads a row it waited for, so exactly one transaction
sees each zero, committed or not: a crash before the commit undoes the end and the decision
together.

Locks are taken in one order in every statement (count shards, then totals, each sorted, then
the jobs released and the workflow's row; a CTE that would otherwise run early reads the one
before it), so two finishes never wait for each other in a cycle: a finish waits for a
job's row only where its own decrement made the zero, which no other transaction can be holding.
A member that ends DEAD or CANCELLED cancels, in the same statement, its WAITING dependents that
say on_upstream_failure="cancel", transitively; their ends are counted as well.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..rules import CALLBACK_KEY_PREFIX
from . import db, transitions
from .enqueue import CHANNEL, HELD_SQL
from .fairness import first_turn_sql
from .sql import CASCADE_TABLE, COUNT, EDGE, JOB, WORKFLOW, S

DIRECT_MAX = 16  # a target with at most this many upstreams counts them in one row
MAX_SHARDS = 64
UPSTREAM_CANCELLED = "upstream"  # how a member cancelled by its upstream's end starts its last_error


def shards_for(upstreams: int) -> int:
    """How many count shards a target of this many upstreams gets (0: one row, its total)."""
    if upstreams <= DIRECT_MAX:
        return 0
    return min(MAX_SHARDS, math.ceil(upstreams / DIRECT_MAX))


@dataclass(frozen=True, slots=True)
class NewMember:
    id: uuid.UUID
    name: str
    kind: str
    queue: str
    priority: int
    payload: str  # JSON, checked
    max_attempts: int
    run_at: Any
    concurrency_key: str | None
    on_upstream_failure: str
    after: tuple[uuid.UUID, ...]
    fair_key: str | None = None
    stride: float | None = None  # a fair kind's: its turn is taken when it becomes PENDING


def store(
    *,
    workflow_id: uuid.UUID,
    name: str,
    members: Sequence[NewMember],
    callbacks: dict[str, dict[str, Any]],
    dedupe_key: str | None = None,
    scope: str = "",
    fingerprint: str = "",
    submitted_by: str = "",
    trace_context: str | None = None,
) -> bool:
    """INSERT a workflow, its members (roots PENDING, the others WAITING), their edges and counts.

    Four statements in the caller's transaction. False when `dedupe_key` found a workflow of this
    scope already (nothing is made)."""
    targets: dict[uuid.UUID, list[uuid.UUID]] = {m.id: [] for m in members}
    for m in members:
        for up in m.after:
            targets[m.id].append(up)
    targets[workflow_id] = [m.id for m in members]
    edge_up: list[uuid.UUID] = []
    edge_target: list[uuid.UUID] = []
    edge_shard: list[int] = []
    count_target: list[uuid.UUID] = []
    count_shard: list[int] = []
    count_remaining: list[int] = []
    for target, ups in targets.items():
        if not ups:
            continue
        shards = shards_for(len(ups))
        # Runs of DIRECT_MAX upstream members in id order (the order claims take due members in) go to
        # the shards in turn: the members a claim takes together end in one or two shards (a row each
        # to lock and update, not one per member), and the next claim's, another worker's, in the next.
        per_shard = [0] * shards
        for rank, up in enumerate(sorted(ups) if shards else ups):
            shard = (rank // DIRECT_MAX) % shards if shards else -1
            edge_up.append(up)
            edge_target.append(target)
            edge_shard.append(shard)
            if shards:
                per_shard[shard] += 1
        for shard, remaining in enumerate(per_shard):
            count_target.append(target)
            count_shard.append(shard)
            count_remaining.append(remaining)
        count_target.append(target)
        count_shard.append(-1)
        count_remaining.append(shards or len(ups))
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {WORKFLOW} (id, name, status, run, members, callbacks, dedupe_key, dedupe_scope,
                                    fingerprint, submitted_by, created_at, updated_at)
            VALUES (%s, %s, {S.RUNNING}, 1, %s, %s::jsonb, %s, %s, %s, %s, now(), now())
            ON CONFLICT DO NOTHING RETURNING id
            """,
            [workflow_id, name, len(members), json.dumps(callbacks), dedupe_key, scope, fingerprint, submitted_by],
        )
        if cursor.fetchone() is None:
            return False
        # A root of a fair kind takes its turn now (as a batch's jobs do); a member that waits keeps
        # its stride in fair_seq, and takes its turn when its release makes it PENDING (_ended).
        cursor.execute(
            f"""
            WITH m AS MATERIALIZED (
                SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::int[],
                                     %s::timestamptz[], %s::text[], %s::text[], %s::bool[], %s::text[], %s::float8[])
                       AS m(id, name, kind, queue, priority, payload, budget, run_at, key, failure, roots, fair_key,
                            stride)
            ),
            wf_roots AS MATERIALIZED (SELECT id, queue, kind, priority, fair_key, stride FROM m WHERE roots),
            {_turns("wf_roots")},
            inserted AS (
                INSERT INTO {JOB} (id, kind, queue, priority, payload, status, attempts, max_attempts, run_at,
                                   worker_id, last_error, dedupe_scope, submitted_by, concurrency_key, trace_context,
                                   workflow_id, member_name, on_upstream_failure, created_at, updated_at, fair_key,
                                   fair_seq)
                SELECT m.id, m.kind, m.queue, m.priority, m.payload::jsonb,
                       CASE WHEN m.roots THEN {S.PENDING} ELSE {S.WAITING} END, 0, m.budget,
                       GREATEST(COALESCE(m.run_at, now()), now()), '', '', %s, %s, m.key, %s::jsonb,
                       %s, m.name, m.failure, now(), now(), m.fair_key,
                       CASE WHEN m.roots THEN ((SELECT t.m FROM wf_turns t) ->> m.id::text)::float8 ELSE m.stride END
                  FROM m
                RETURNING queue, status, run_at
            )
            SELECT pg_notify('{CHANNEL}', queue)
              FROM (SELECT DISTINCT queue FROM inserted WHERE status = {S.PENDING} AND run_at <= now()) woken
            """,
            [
                [m.id for m in members],
                [m.name for m in members],
                [m.kind for m in members],
                [m.queue for m in members],
                [m.priority for m in members],
                [m.payload for m in members],
                [m.max_attempts for m in members],
                [m.run_at for m in members],
                [m.concurrency_key for m in members],
                # A root has no upstream to fail: "" (as a job of no workflow), so its claim reads none.
                [m.on_upstream_failure if m.after else "" for m in members],
                [not m.after for m in members],
                [m.fair_key for m in members],
                [m.stride for m in members],
                scope,
                submitted_by,
                trace_context,
                workflow_id,
            ],
        )
        cursor.execute(
            f"""INSERT INTO {EDGE} (upstream, target, shard, workflow)
                SELECT e.up, e.target, e.shard, %s
                  FROM unnest(%s::uuid[], %s::uuid[], %s::int[]) AS e(up, target, shard)""",
            [workflow_id, edge_up, edge_target, edge_shard],
        )
        cursor.execute(
            f"""INSERT INTO {COUNT} (target, shard, remaining, failed, workflow)
                SELECT c.target, c.shard, c.remaining, 0, %s
                  FROM unnest(%s::uuid[], %s::int[], %s::int[]) AS c(target, shard, remaining)""",
            [workflow_id, count_target, count_shard, count_remaining],
        )
    return True


def held(scope: str, bound: int) -> int:
    """The submitter's unfinished jobs, counted up to `bound`."""
    with db.cursor() as cursor:
        cursor.execute(HELD_SQL, [scope, bound])
        return int(cursor.fetchone()[0])


def _map(rows: str, key: str, value: str) -> str:
    """A jsonb object from `rows`, `key` (as text) to `value`: read by ->> in O(log n) per row.

    A statement that asks, for each of n rows, whether it is among m others (or what another CTE
    says of it) does so through such an object, never by `= ANY(ARRAY(...))` as a filter or a
    subquery over a CTE per row, which cost n x m: a 10,000-member chain's cancel took 21 s so."""
    return f"(SELECT COALESCE(jsonb_object_agg({key}, {value}), '{{}}'::jsonb) AS m FROM {rows})"


def _walk(start: str, step: str, limit: int) -> str:
    """The members reachable from the ids of `start` by edges to members that satisfy `step` (a
    condition on the member j), transitively, breadth first, at most `limit` of them.

    Each step is a probe of the edges' upstream index and of the jobs' primary key per row (OFFSET 0
    keeps each LATERAL a subquery of its own), so no statistics can make it a walk of either table;
    UNION keeps each member once, and the LIMIT stops the recursion once it has enough."""
    probe = f"""CROSS JOIN LATERAL (SELECT e.target FROM {EDGE} e WHERE e.upstream = s.id OFFSET 0) e
        CROSS JOIN LATERAL (SELECT j.id FROM {JOB} j WHERE j.id = e.target AND {step} OFFSET 0) j"""
    return f"""WITH RECURSIVE reach(id) AS (
        SELECT j.id FROM {start} s {probe}
        UNION
        SELECT j.id FROM reach s {probe}
    ) SELECT id FROM reach LIMIT {int(limit)}"""


def _recount(opened: str, ended: bool) -> str:
    """CTEs that count the ends (or, a replay, the reopenings) of the members in `opened` (id, status).

    An end takes one off `remaining` of each target's shard its edge names (and adds one to `failed`
    if it was not a success); a reopening gives them back. A shard that reaches zero takes one off
    its target's total and hands it its failures; a shard that leaves zero takes them back. Ends
    `wf_tops` (target, remaining, failed, workflow of each total changed). Rows are locked by key in
    a set order, then updated by key, each reading its delta from a jsonb object (see _map)."""
    step = "-1" if ended else "1"
    failed = f"CASE WHEN (SELECT m FROM wf_opened_map) ->> e.upstream::text = {S.SUCCEEDED} THEN 0 ELSE 1 END"
    shard_key = "c.target::text || ':' || c.shard::text"
    delta_map = _map("wf_delta WHERE shard >= 0", "target::text || ':' || shard::text", "jsonb_build_array(dr, df)")
    return f"""
wf_opened_map AS MATERIALIZED {_map(opened, "id::text", "status")},
wf_delta AS MATERIALIZED (
    SELECT e.target, e.shard, sum({step})::int AS dr, sum({failed if ended else "-1"})::int AS df
      FROM {EDGE} e
     WHERE e.upstream = ANY(ARRAY(SELECT id FROM {opened}))
     GROUP BY e.target, e.shard
),
wf_delta_map AS MATERIALIZED {delta_map},
wf_shard_locks AS MATERIALIZED (
    SELECT c.id FROM {COUNT} c
     WHERE c.target = ANY(ARRAY(SELECT DISTINCT target FROM wf_delta WHERE shard >= 0)) AND c.shard >= 0
       AND (SELECT m FROM wf_delta_map) ? ({shard_key})
     ORDER BY c.target, c.shard FOR UPDATE OF c
),
wf_shards AS (
    UPDATE {COUNT} c
       SET remaining = c.remaining + ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 0)::int,
           failed = c.failed + ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 1)::int
     WHERE c.id = ANY(ARRAY(SELECT id FROM wf_shard_locks))
 RETURNING c.target, c.remaining, c.failed,
           ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 0)::int AS dr,
           ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 1)::int AS df
),
wf_total_delta AS MATERIALIZED (
    SELECT target, sum(dr)::int AS dr, sum(df)::int AS df FROM (
        SELECT target, dr, df FROM wf_delta WHERE shard = -1
        UNION ALL
        SELECT target, -1, failed FROM wf_shards WHERE remaining = 0 AND remaining - dr > 0
        UNION ALL
        SELECT target, 1, df - failed FROM wf_shards WHERE remaining > 0 AND remaining - dr = 0
    ) t GROUP BY target
),
wf_total_map AS MATERIALIZED {_map("wf_total_delta", "target::text", "jsonb_build_array(dr, df)")},
wf_total_locks AS MATERIALIZED (
    SELECT c.id FROM {COUNT} c
     WHERE c.target = ANY(ARRAY(SELECT target FROM wf_total_delta)) AND c.shard = -1
     ORDER BY c.target FOR UPDATE
),
wf_tops AS (
    UPDATE {COUNT} c
       SET remaining = c.remaining + ((SELECT m FROM wf_total_map) -> c.target::text ->> 0)::int,
           failed = c.failed + ((SELECT m FROM wf_total_map) -> c.target::text ->> 1)::int
     WHERE c.id = ANY(ARRAY(SELECT id FROM wf_total_locks)) AND c.shard = -1
 RETURNING c.target, c.remaining, c.failed, c.workflow
)"""


# How many members one statement's walk of the graph cancels before it hands the rest on
# (WorkflowCascade): what a finish can add to a batch of other jobs' ends, whatever the graph.
WALK = 200
# How many members a hand-off's own transaction cancels (cascade()): one short statement each.
CASCADE = 500


def _ended(rows: str | None, *, walk: int = WALK) -> str:
    """The CTEs that follow ends of members (transitions.ENDED): the WAITING dependents of the
    members that failed are cancelled (their error names the upstream that doomed them),
    transitively, at most `walk` of them here and the rest handed on (WorkflowCascade); every end
    is counted, what waited on the ends is released, and a workflow whose count reaches zero ends
    and enqueues its callbacks.

    `rows` (id, status, workflow_id) are the jobs the statement ended; None: the statement ended
    none, and walks on from `wf_picked` (member ids handed on earlier: cascade()).

    A callback already stored (the failure callback an earlier failure fired) is read, not inserted
    again: ON CONFLICT alone waits for the key's holder, and a finish ending that callback's job
    holds its key while it may wait for a count this statement has locked."""
    if rows is None:
        src = "SELECT NULL::uuid AS id, NULL::text AS status, NULL::uuid AS workflow_id WHERE false"
        start = f"""SELECT j.id, j.status, j.workflow_id FROM {JOB} j
                     WHERE j.id = ANY(ARRAY(SELECT member FROM wf_picked)) AND j.status IN ({S.DEAD}, {S.CANCELLED})"""
    else:
        src = f"SELECT id, status, workflow_id FROM {rows} WHERE workflow_id IS NOT NULL"
        start = f"SELECT id, status, workflow_id FROM wf_src WHERE status <> {S.SUCCEEDED}"
    doomed_step = (
        f"j.status = {S.WAITING} AND j.on_upstream_failure = {S.cancel}"
        " AND NOT ((SELECT m FROM wf_src_map) ? j.id::text)"
    )
    cause = "(SELECT m FROM wf_from_map) ? e.upstream::text OR (SELECT m FROM wf_doomed_map) ? e.upstream::text"
    key = callback_key("f.workflow_id", "f.run", "f.event")
    return f"""wf_src AS MATERIALIZED ({src}),
wf_src_map AS MATERIALIZED {_map("wf_src", "id::text", "status")},
wf_from AS MATERIALIZED ({start}),
wf_from_map AS MATERIALIZED {_map("wf_from", "id::text", "status")},
wf_walk AS MATERIALIZED ({_walk("wf_from", doomed_step, walk + 1)}),
wf_doomed AS MATERIALIZED (SELECT id FROM wf_walk LIMIT {int(walk)}),
wf_doomed_map AS MATERIALIZED {_map("wf_doomed", "id::text", "true")},
wf_cause AS MATERIALIZED (
    SELECT d.id AS target,
           format('{UPSTREAM_CANCELLED} member %%s (%%s) ended %%s',
                  (SELECT u.member_name FROM {JOB} u WHERE u.id = c.upstream), c.upstream,
                  COALESCE((SELECT m FROM wf_from_map) ->> c.upstream::text, {S.CANCELLED})) AS message
      FROM wf_doomed d CROSS JOIN LATERAL (
          SELECT e.upstream FROM {EDGE} e WHERE e.target = d.id AND ({cause})
           ORDER BY (SELECT m FROM wf_from_map) ? e.upstream::text DESC LIMIT 1) c
),
wf_cause_map AS MATERIALIZED {_map("wf_cause", "target::text", "message")},
wf_cancelled AS (
    UPDATE {JOB} j
       SET status = {S.CANCELLED}, finished_at = now(), updated_at = now(),
           last_error = (SELECT m FROM wf_cause_map) ->> j.id::text
     WHERE j.id = ANY(ARRAY(SELECT id FROM wf_doomed)) AND j.status = {S.WAITING}
 RETURNING j.id, j.status, j.workflow_id
),
wf_handed AS (
    INSERT INTO {CASCADE_TABLE} (member, workflow, created_at)
    SELECT f.id, f.workflow_id, now()
      FROM (SELECT id, workflow_id FROM wf_from UNION ALL SELECT id, workflow_id FROM wf_cancelled) f
     WHERE (SELECT count(*) FROM wf_walk) > {int(walk)}
       AND EXISTS (SELECT 1 FROM {EDGE} e
                    WHERE e.upstream = f.id AND NOT ((SELECT m FROM wf_doomed_map) ? e.target::text)
                      AND EXISTS (SELECT 1 FROM {JOB} j WHERE j.id = e.target AND {doomed_step}))
 RETURNING member
),
wf_ended AS MATERIALIZED (
    SELECT id, status, workflow_id FROM wf_src UNION ALL SELECT id, status, workflow_id FROM wf_cancelled
),{_recount("wf_ended", ended=True)},
wf_zero AS MATERIALIZED (SELECT target, failed, workflow FROM wf_tops WHERE remaining = 0),
wf_zero_map AS MATERIALIZED {_map("wf_zero", "target::text", "failed")},
wf_release AS MATERIALIZED (
    SELECT j.id, j.queue, j.kind, j.priority, j.fair_key, j.fair_seq AS stride FROM {JOB} j
     WHERE j.id = ANY(ARRAY(SELECT target FROM wf_zero WHERE target <> workflow)) AND j.status = {S.WAITING}
       AND NOT ((SELECT m FROM wf_opened_map) ? j.id::text)
       AND (j.on_upstream_failure = {S.run} OR ((SELECT m FROM wf_zero_map) ->> j.id::text)::int = 0)
),{_turns("wf_release")},
wf_released AS (
    UPDATE {JOB} j SET status = {S.PENDING}, run_at = GREATEST(j.run_at, now()), updated_at = now(),
           fair_seq = ((SELECT m FROM wf_turns) ->> j.id::text)::float8
     WHERE j.id = ANY(ARRAY(SELECT id FROM wf_release)) AND j.status = {S.WAITING}
 RETURNING j.id, pg_notify('{CHANNEL}', j.queue)
),
wf_done AS (
    UPDATE {WORKFLOW} w
       SET status = CASE WHEN w.cancel_requested_at IS NOT NULL THEN {S.CANCELLED}
                         WHEN ((SELECT m FROM wf_zero_map) ->> w.id::text)::int > 0 THEN {S.FAILED}
                         ELSE {S.SUCCEEDED} END,
           finished_at = now(), updated_at = now()
     WHERE w.id = ANY(ARRAY(SELECT target FROM wf_zero WHERE target = workflow))
 RETURNING w.id, w.run, w.status, w.callbacks, w.dedupe_scope, w.submitted_by
),
wf_fire AS MATERIALIZED (
    SELECT d.id AS workflow_id, d.run, ev.event, d.callbacks -> ev.event AS cb, d.dedupe_scope, d.submitted_by
      FROM wf_done d CROSS JOIN (VALUES ('success'), ('failure'), ('complete')) AS ev(event)
     WHERE d.callbacks ? ev.event
       AND (ev.event = 'complete' OR (ev.event = 'success') = (d.status = {S.SUCCEEDED}))
    UNION ALL
    SELECT w.id, w.run, 'failure', w.callbacks -> 'failure', w.dedupe_scope, w.submitted_by
      FROM {WORKFLOW} w
     WHERE w.id = ANY(ARRAY(SELECT DISTINCT workflow_id FROM wf_ended WHERE status <> {S.SUCCEEDED}))
       AND NOT (w.id = ANY(ARRAY(SELECT id FROM wf_done))) AND w.callbacks ? 'failure'
),
wf_callbacks AS (
    INSERT INTO {JOB} (id, kind, queue, priority, payload, status, attempts, max_attempts, run_at, worker_id,
                       last_error, dedupe_key, dedupe_scope, submitted_by, workflow_id, created_at, updated_at,
                       fair_key, fair_seq)
    SELECT gen_random_uuid(), f.cb ->> 'kind', f.cb ->> 'queue', (f.cb ->> 'priority')::int,
           COALESCE(f.cb -> 'payload', '{{}}'::jsonb) || jsonb_build_object('workflow', f.workflow_id::text),
           {S.PENDING}, 0, (f.cb ->> 'max_attempts')::int, now(), '', '', {key},
           f.dedupe_scope, f.submitted_by, f.workflow_id, now(), now(), f.cb ->> 'fair_key',
           CASE WHEN f.cb ? 'stride' THEN {_CALLBACK_TURN} END
      FROM wf_fire f
     WHERE (SELECT count(*) FROM wf_tops) >= 0
       AND NOT EXISTS (SELECT 1 FROM {JOB} k WHERE k.dedupe_scope = f.dedupe_scope
                                             AND k.dedupe_key = {key})
     ORDER BY f.workflow_id, f.event
    ON CONFLICT DO NOTHING
 RETURNING id, pg_notify('{CHANNEL}', queue)
)"""


def _turns(release: str) -> str:
    """`wf_turns`: the fair turn of each member of `release` (id, queue, kind, priority, fair_key,
    stride) that has a stride (a member of a fair kind keeps its stride in fair_seq while it waits):
    its key's next turns, one stride apart, read once per (queue, kind, priority, key), as a batch's."""
    first = first_turn_sql(
        keyed=None, queue="g.queue", kind="g.kind", priority="g.priority", key="g.fair_key", stride="g.stride"
    )
    turns = f"""(SELECT r.id, t.first + r.stride * (row_number() OVER (
                    PARTITION BY r.queue, r.kind, r.priority, r.fair_key, r.stride ORDER BY r.id) - 1) AS seq
               FROM {release} r JOIN wf_turn_first t
                 ON t.queue = r.queue AND t.kind = r.kind AND t.priority = r.priority
                AND t.fair_key IS NOT DISTINCT FROM r.fair_key AND t.stride = r.stride) turns"""
    return f"""
wf_turn_first AS MATERIALIZED (
    SELECT g.queue, g.kind, g.priority, g.fair_key, g.stride, {first} AS first
      FROM (SELECT DISTINCT queue, kind, priority, fair_key, stride FROM {release} WHERE stride IS NOT NULL) g
),
wf_turns AS MATERIALIZED {_map(turns, "id::text", "seq")}"""


# A callback of a fair kind takes its turn as it is enqueued (its spec holds its key's stride).
_CALLBACK_TURN = first_turn_sql(
    keyed=None,
    queue="(f.cb ->> 'queue')",
    kind="(f.cb ->> 'kind')",
    priority="(f.cb ->> 'priority')::int",
    key="(f.cb ->> 'fair_key')",
    stride="(f.cb ->> 'stride')::float8",
)


def callback_key(workflow: str, run: str, event: str) -> str:
    """SQL: a callback's dedupe key, `workflow:<id>:<run>:<event>`, unique in its submitter's scope."""
    return f"'{CALLBACK_KEY_PREFIX}' || {workflow}::text || ':' || {run}::text || ':' || {event}"


def _reopened(rows: str) -> str:
    """The CTEs a replay of a DEAD member adds to its statement (transitions.REOPENED): the members
    its end cancelled wait again, the counts take them all back, and the workflow starts a new run.

    A member cancelled by an upstream stays cancelled if another of its failures is still there:
    a DEAD upstream other than this one, an operator's cancel, or an upstream that stays cancelled.
    The workflow's row is updated after the counts (its WHERE reads wf_tops), as the end's callbacks
    are inserted after them, in one order (by workflow, then event): CTEs run in no set order, and
    a finish holding a count may be waiting for that row, or for a callback's key."""
    by_upstream = f"j.status = {S.CANCELLED} AND j.last_error LIKE '{UPSTREAM_CANCELLED} %%'"
    everything = 2**31 - 1  # a replay walks as far as the graph goes (an operator's action, not a worker's)
    unblocked = f"{by_upstream} AND NOT ((SELECT m FROM wf_blocked_map) ? j.id::text)"
    return f"""wf_r AS MATERIALIZED (SELECT id, status, workflow_id FROM {rows} WHERE workflow_id IS NOT NULL),
wf_r_map AS MATERIALIZED {_map("wf_r", "id::text", "true")},
wf_blockers AS MATERIALIZED (
    SELECT u.id FROM {JOB} u
     WHERE u.workflow_id = ANY(ARRAY(SELECT DISTINCT workflow_id FROM wf_r)) AND u.member_name IS NOT NULL
       AND ((u.status = {S.DEAD} AND NOT ((SELECT m FROM wf_r_map) ? u.id::text))
            OR (u.status = {S.CANCELLED} AND u.last_error NOT LIKE '{UPSTREAM_CANCELLED} %%'))
),
wf_blocked AS MATERIALIZED ({_walk("wf_blockers", by_upstream, everything)}),
wf_blocked_map AS MATERIALIZED {_map("wf_blocked", "id::text", "true")},
wf_reach AS MATERIALIZED ({_walk("wf_r", unblocked, everything)}),
wf_rewaited AS (
    UPDATE {JOB} j SET status = {S.WAITING}, finished_at = NULL, last_error = '', updated_at = now()
     WHERE j.id = ANY(ARRAY(SELECT id FROM wf_reach)) AND j.status = {S.CANCELLED}
 RETURNING j.id, j.status, j.workflow_id
),
wf_opened AS MATERIALIZED (
    SELECT id, status, workflow_id FROM wf_r UNION ALL SELECT id, status, workflow_id FROM wf_rewaited
),{_recount("wf_opened", ended=False)},
wf_new_run AS (
    UPDATE {WORKFLOW} w SET run = w.run + 1, status = {S.RUNNING}, finished_at = NULL, cancel_requested_at = NULL,
           updated_at = now()
     WHERE w.id = ANY(ARRAY(SELECT DISTINCT workflow_id FROM wf_r))
       AND (SELECT count(*) FROM wf_tops) >= 0
 RETURNING w.id
)"""


# Members whose every upstream has ended, some of them not in success, that still wait: an end and a
# replay that re-waited the member, concurrent, each read the other's rows before it committed (the
# end's snapshot saw the member cancelled, the replay's saw the upstream running). Their counts,
# read under the count's lock, cannot be wrong; the release above leaves them, and cancel_stuck
# cancels them in the transaction of the end that made their count zero.
_STUCK_SQL = f"""
    SELECT DISTINCT e.target FROM {EDGE} e
     CROSS JOIN LATERAL (SELECT c.remaining, c.failed FROM {COUNT} c
                          WHERE c.target = e.target AND c.shard = -1 OFFSET 0) c
     CROSS JOIN LATERAL (SELECT j.id FROM {JOB} j WHERE j.id = e.target AND j.status = {S.WAITING}
                            AND j.on_upstream_failure = {S.cancel} OFFSET 0) j
     WHERE e.upstream = ANY(%s::uuid[]) AND c.remaining = 0 AND c.failed > 0
"""


def cancel_stuck(ended: Sequence[uuid.UUID]) -> int:
    """In the caller's transaction, after members in `ended` ended: cancel their dependents left
    waiting with every upstream ended and some failed (and, through the seam, what follows from
    that). Returns how many. One indexed read when there are none, which is nearly always."""
    total = 0
    ended = list(ended)
    with db.cursor() as cursor:
        while ended:
            db.run(cursor, _STUCK_SQL, [ended])
            stuck = [row[0] for row in cursor.fetchall()]
            if not stuck:
                break
            cursor.execute(
                f"""
                WITH moved AS (
                    UPDATE {JOB} j SET status = {S.CANCELLED}, finished_at = now(), updated_at = now(),
                           last_error = '{UPSTREAM_CANCELLED} members ended DEAD or CANCELLED before it could run'
                     WHERE j.id = ANY(%s::uuid[]) AND j.status = {S.WAITING}
                 RETURNING j.id, j.status, j.workflow_id
                ){transitions.after("moved", transitions.ENDED)}
                SELECT id FROM moved
                """,
                [stuck],
            )
            ended = [row[0] for row in cursor.fetchall()]
            total += len(ended)
    return total


_CASCADE_SQL = f"""
    WITH wf_picked AS MATERIALIZED (
        SELECT id, member FROM {CASCADE_TABLE} ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
    ),
    wf_taken AS (DELETE FROM {CASCADE_TABLE} WHERE id = ANY(ARRAY(SELECT id FROM wf_picked))),
    {_ended(None, walk=CASCADE)}
    SELECT (SELECT count(*) FROM wf_picked), ARRAY(SELECT id FROM wf_cancelled),
           EXISTS (SELECT 1 FROM wf_zero WHERE failed > 0)
"""


def handed_on(*, older_than: float) -> bool:
    """Whether a cancel handed on more than `older_than` seconds ago is still waiting to go on."""
    with db.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {CASCADE_TABLE} WHERE created_at < now() - make_interval(secs => %s))",
            [older_than],
        )
        return bool(cursor.fetchone()[0])


def drain(*, seconds: float = 5.0) -> int:
    """cascade() until nothing is handed on, or for about `seconds`; how many dependents it cancelled.

    For an operator's cancel or replay, after its own transaction: the worker's writer and the
    maintenance leader take whatever is left."""
    deadline = time.monotonic() + seconds
    total = 0
    while True:
        taken, cancelled = cascade()
        total += cancelled
        if not taken or time.monotonic() >= deadline:
            return total


def cascade(*, members: int = 50) -> tuple[int, int]:
    """Cancel onward from up to `members` members handed on (WorkflowCascade), in one short
    transaction: at most CASCADE dependents, the rest handed on again. Returns (members taken,
    dependents cancelled); (0, 0) when nothing was handed on."""
    with db.atomic(), db.cursor() as cursor:
        db.run(cursor, _CASCADE_SQL, [members])
        taken, cancelled, again = cursor.fetchone()
        stuck = cancel_stuck(cancelled) if again else 0
    return int(taken), len(cancelled) + stuck


def hook(rows: str, change: str) -> str:
    return _ended(rows) if change == transitions.ENDED else _reopened(rows)


def cancel(workflow_id: uuid.UUID) -> tuple[int, int] | None:
    """Cancel a RUNNING workflow: its WAITING and PENDING members now, through the seam, and a request
    to stop to each RUNNING one. None if it was not RUNNING; else (cancelled, asked to stop)."""
    with db.atomic(), db.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {WORKFLOW} SET cancel_requested_at = now(), updated_at = now()
                 WHERE id = %s AND status = {S.RUNNING} AND cancel_requested_at IS NULL RETURNING id""",
            [workflow_id],
        )
        if cursor.fetchone() is None:
            return None
        # One UPDATE for both, so that a member claimed meanwhile is re-read as RUNNING and asked to stop.
        cursor.execute(
            f"""
            WITH moved AS (
                UPDATE {JOB} j
                   SET status = CASE WHEN j.status = {S.RUNNING} THEN j.status ELSE {S.CANCELLED} END,
                       finished_at = CASE WHEN j.status = {S.RUNNING} THEN NULL ELSE now() END,
                       last_error = CASE WHEN j.status = {S.RUNNING} THEN j.last_error
                                         ELSE 'workflow cancelled by an operator' END,
                       cancel_requested_at = CASE WHEN j.status = {S.RUNNING}
                                                  THEN COALESCE(j.cancel_requested_at, now()) END,
                       updated_at = now()
                 WHERE j.workflow_id = %s AND j.member_name IS NOT NULL
                   AND j.status IN ({S.WAITING}, {S.PENDING}, {S.RUNNING})
             RETURNING j.id, j.status, j.workflow_id
            ){transitions.after("moved", transitions.ENDED)}
            SELECT count(*) FILTER (WHERE status = {S.CANCELLED}), count(*) FILTER (WHERE status = {S.RUNNING})
              FROM moved
            """,
            [workflow_id],
        )
        cancelled, asked = cursor.fetchone()
    return int(cancelled), int(asked)


def register() -> None:
    # A count that reached zero with failures may leave a member the release could not see waiting
    # (_STUCK_SQL): only then does the end need cancel_stuck's read.
    transitions.register(
        "workflows", hook, members_only=True, recheck="EXISTS (SELECT 1 FROM wf_zero WHERE failed > 0)"
    )
