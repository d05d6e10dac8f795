"""Workflows in SQL: storing one (its members, edges and counts), cancelling one, and going on with
a cancel a statement handed on. What a member's end does is the door's (reliableq.queue.door, with
the CTEs of reliableq.queue.graph)."""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..models import JobStatus
from . import db, door, graph
from .enqueue import CHANNEL, HELD_SQL
from .sql import CASCADE_TABLE, COUNT, EDGE, JOB, WORKFLOW, S

DIRECT_MAX = 16  # a target with at most this many upstreams counts them in one row
MAX_SHARDS = 64


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


_INSERT_WORKFLOW_SQL = f"""
            INSERT INTO {WORKFLOW} (id, name, status, run, members, callbacks, dedupe_key, dedupe_scope,
                                    fingerprint, submitted_by, created_at, updated_at)
            VALUES (%s, %s, {S.RUNNING}, 1, %s, %s::jsonb, %s, %s, %s, %s, now(), now())
            ON CONFLICT DO NOTHING RETURNING id
            """


_INSERT_MEMBERS_SQL = f"""
            WITH m AS MATERIALIZED (
                SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::int[],
                                     %s::timestamptz[], %s::text[], %s::text[], %s::bool[], %s::text[], %s::float8[])
                       AS m(id, name, kind, queue, priority, payload, budget, run_at, key, failure, roots, fair_key,
                            stride)
            ),
            wf_roots AS MATERIALIZED (SELECT id, queue, kind, priority, fair_key, stride FROM m WHERE roots),
            {graph.turns("wf_roots")},
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
            """


_INSERT_EDGES_SQL = f"""INSERT INTO {EDGE} (upstream, target, shard, workflow)
                SELECT e.up, e.target, e.shard, %s
                  FROM unnest(%s::uuid[], %s::uuid[], %s::int[]) AS e(up, target, shard)"""


_INSERT_COUNTS_SQL = f"""INSERT INTO {COUNT} (target, shard, remaining, failed, workflow)
                SELECT c.target, c.shard, c.remaining, 0, %s
                  FROM unnest(%s::uuid[], %s::int[], %s::int[]) AS c(target, shard, remaining)"""


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
            _INSERT_WORKFLOW_SQL,
            [workflow_id, name, len(members), json.dumps(callbacks), dedupe_key, scope, fingerprint, submitted_by],
        )
        if cursor.fetchone() is None:
            return False
        # A root of a fair kind takes its turn now (as a batch's jobs do); a member that waits keeps
        # its stride in fair_seq, and takes its turn when its release makes it PENDING (graph.ended).
        cursor.execute(
            _INSERT_MEMBERS_SQL,
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
            _INSERT_EDGES_SQL,
            [workflow_id, edge_up, edge_target, edge_shard],
        )
        cursor.execute(
            _INSERT_COUNTS_SQL,
            [workflow_id, count_target, count_shard, count_remaining],
        )
    return True


def held(scope: str, bound: int) -> int:
    """The submitter's unfinished jobs, counted up to `bound`."""
    with db.cursor() as cursor:
        cursor.execute(HELD_SQL, [scope, bound])
        return int(cursor.fetchone()[0])


# The members taken up and not cancelled (past the statement's bound) stay handed on for the next
# step; the others are done with (cancelled now, or no longer doomed: a replay reopened an upstream).
_CASCADE_SQL = door.statement(
    "cascade",
    head=f"""wf_picked AS MATERIALIZED (
        SELECT id, member FROM {CASCADE_TABLE} ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
    ),""",
    moved=None,
    change=door.Change.ENDED,
    tail=f""",
    wf_taken AS (
        DELETE FROM {CASCADE_TABLE} c
         WHERE c.id = ANY(ARRAY(SELECT id FROM wf_picked))
           AND NOT (c.member = ANY(ARRAY(SELECT id FROM wf_seeds))
                    AND NOT ((SELECT m FROM wf_doomed_map) ? c.member::text))
    )
    SELECT c.id, t.n, {door.recheck()}
      FROM (SELECT count(*) AS n FROM wf_picked) t LEFT JOIN wf_cancelled c ON true""",
)


_HANDED_ON_SQL = f"SELECT EXISTS (SELECT 1 FROM {CASCADE_TABLE} WHERE created_at < now() - make_interval(secs => %s))"


def handed_on(*, older_than: float) -> bool:
    """Whether a cancel handed on more than `older_than` seconds ago is still waiting to go on."""
    with db.cursor() as cursor:
        cursor.execute(
            _HANDED_ON_SQL,
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
    transaction: at most graph.WALK dependents, the rest handed on again. Returns (members taken,
    dependents cancelled); (0, 0) when nothing was handed on."""
    with db.atomic(), db.cursor() as cursor:
        rows = door.run(cursor, _CASCADE_SQL, [members], prepared=True)
    return int(rows[0][1]), sum(1 for row in rows if row[0] is not None)


_CANCEL_SQL = door.statement(
    "cancel_workflow",
    moved=f"""UPDATE {JOB} j
                 SET status = CASE WHEN j.status = {S.RUNNING} THEN j.status ELSE {S.CANCELLED} END,
                     finished_at = CASE WHEN j.status = {S.RUNNING} THEN NULL ELSE now() END,
                     last_error = CASE WHEN j.status = {S.RUNNING} THEN j.last_error
                                       ELSE 'workflow cancelled by an operator' END,
                     cancel_requested_at = CASE WHEN j.status = {S.RUNNING}
                                                THEN COALESCE(j.cancel_requested_at, now()) END,
                     updated_at = now()
               WHERE j.workflow_id = %s AND j.member_name IS NOT NULL
                 AND j.status IN ({S.WAITING}, {S.PENDING}, {S.RUNNING})
           RETURNING j.id, j.status, j.workflow_id""",
    change=door.Change.ENDED,
    tail=f"SELECT id, status, {door.recheck()} FROM moved",
)


_REQUEST_CANCEL_SQL = f"""UPDATE {WORKFLOW} SET cancel_requested_at = now(), updated_at = now()
                 WHERE id = %s AND status = {S.RUNNING} AND cancel_requested_at IS NULL RETURNING id"""


def cancel(workflow_id: uuid.UUID) -> tuple[int, int] | None:
    """Cancel a RUNNING workflow: its WAITING and PENDING members now, through the door, and a request
    to stop to each RUNNING one. None if it was not RUNNING; else (cancelled, asked to stop)."""
    with db.atomic(), db.cursor() as cursor:
        cursor.execute(
            _REQUEST_CANCEL_SQL,
            [workflow_id],
        )
        if cursor.fetchone() is None:
            return None
        # One UPDATE for both, so that a member claimed meanwhile is re-read as RUNNING and asked to stop.
        rows = door.run(cursor, _CANCEL_SQL, [workflow_id])
        cancelled = sum(1 for _, status in rows if status == JobStatus.CANCELLED)
        asked = sum(1 for _, status in rows if status == JobStatus.RUNNING)
    return int(cancelled), int(asked)
