"""What an owner writes under its lease token: renewals, progress, the finish, a lost lease, and
the release of claims whose commit it never heard acknowledged."""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from .. import faults
from ..conf import reliableq_settings
from ..models import JobStatus, Outcome, StepKind
from . import db, door
from .events import lock_of
from .records import Finish, FinishResult
from .sql import ATTEMPT, EVENT, JOB, RETURN_VALUE, RUNNING_FENCE, STEP, S, attempts_of

_RENEW_SQL = f"""
            WITH free AS MATERIALIZED (
                SELECT j.id FROM {JOB} j WHERE j.id = ANY(%s::uuid[]) ORDER BY j.id FOR UPDATE SKIP LOCKED
            ),
            renewed AS (
                UPDATE {JOB} j
                   SET lease_expires_at = now() + make_interval(secs => %s)
                  FROM unnest(%s::uuid[], %s::uuid[]) AS held(id, token)
                 WHERE j.id = ANY(ARRAY(SELECT id FROM free)) AND {RUNNING_FENCE}
                   AND j.id = held.id AND j.lease_token = held.token
             RETURNING j.id, j.cancel_requested_at IS NOT NULL
            )
            SELECT * FROM renewed
             UNION ALL
            SELECT b.id, false FROM {JOB} b
             WHERE b.id = ANY(%s::uuid[]) AND NOT (b.id = ANY(ARRAY(SELECT id FROM free)))
            """


def renew(leases: Iterable[tuple[uuid.UUID, uuid.UUID]], *, lease_seconds: float) -> dict[uuid.UUID, bool]:
    """Extend every lease this process holds in one statement.

    Returns the job ids still owned, each with whether an operator asked to cancel it: the
    worker learns of a cancel request by the renewal it makes anyway (every LEASE_SECONDS/3),
    with no connection of its own, so it works through a transaction pooler too.

    The renewal never waits for a row lock. A job whose row another transaction holds (this
    worker's own finish of it, nearly always) is left to the next beat and returned as owned,
    with no cancel request: a renewal that waited there while holding the rows it had already
    renewed could close a cycle with that finish, whose plan may meet the rows in another order.
    """
    leases = sorted(leases)
    if not leases:
        return {}
    ids, tokens = zip(*leases, strict=True)
    with db.cursor() as cursor:
        db.run(
            cursor,
            _RENEW_SQL,
            (list(ids), float(lease_seconds), list(ids), list(tokens), list(ids)),
        )
        return dict(cursor.fetchall())


_PROGRESS_SQL = f"""
            UPDATE {JOB} j SET progress = v.progress::jsonb || jsonb_build_object('at', now())
              FROM unnest(%s::uuid[], %s::uuid[], %s::text[]) AS v(id, token, progress)
             WHERE j.id = ANY(%s::uuid[]) AND {RUNNING_FENCE} AND j.id = v.id AND j.lease_token = v.token
            """


def record_progress(reports: Iterable[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]) -> int:
    """Write the latest progress of these attempts in one statement, fenced by their lease tokens."""
    reports = sorted(reports, key=lambda report: report[0])
    if not reports:
        return 0
    ids, tokens, values = zip(*reports, strict=True)
    with db.cursor() as cursor:
        cursor.execute(
            _PROGRESS_SQL,
            (list(ids), list(tokens), [json.dumps(v) for v in values], list(ids)),
        )
        return int(cursor.rowcount)


_MARK_LOST_SQL = f"""
            WITH lost AS MATERIALIZED (SELECT * FROM unnest(%s::uuid[], %s::uuid[]) AS lost(id, token)),
            found AS MATERIALIZED (
                SELECT a.id, a.job_id, a.outcome FROM {ATTEMPT} a
                 WHERE a.id = ANY({attempts_of("lost", "o.lease_token = k.token")})
            ),
            marked AS (
                UPDATE {ATTEMPT} a
                   SET outcome = {S.LEASE_LOST}, finished_at = now(), error = %s
                 WHERE a.id = ANY(ARRAY(SELECT id FROM found)) AND a.outcome = {S.RUNNING}
             RETURNING a.job_id
            )
            SELECT job_id FROM marked
            UNION
            SELECT job_id FROM found WHERE outcome IN ({S.LEASE_EXPIRED}, {S.LEASE_LOST})
            """


def mark_lost(leases: Iterable[tuple[uuid.UUID, uuid.UUID]], *, reason: str) -> set[uuid.UUID]:
    """Record LEASE_LOST on attempts still open under these tokens; never touch their jobs.

    Returns the jobs really lost to another owner: those just marked, and those whose attempt
    a rescuer already closed (LEASE_EXPIRED). An attempt its owner finished itself (a finish
    that raced the heartbeat) is not a loss and is not returned.
    """
    leases = list(leases)
    if not leases:
        return set()
    ids, tokens = zip(*leases, strict=True)
    # A lease token belongs to one attempt of its job: `found` holds it, by one probe per job.
    with db.cursor() as cursor:
        cursor.execute(
            _MARK_LOST_SQL,
            (list(ids), list(tokens), reason),
        )
        return {row[0] for row in cursor.fetchall()}


_RELEASE_SQL = door.statement(
    "release_unacknowledged",
    head=f"""orphans AS MATERIALIZED (
                SELECT id, lease_token FROM {JOB}
                 WHERE status = {S.RUNNING} AND worker_id = %s AND NOT (lease_token = ANY(%s::uuid[]))
                   FOR UPDATE
            ),
            closed AS (
                UPDATE {ATTEMPT} a
                   SET outcome = {S.LEASE_LOST}, finished_at = now(),
                       error = 'claim commit was not acknowledged; the worker released the job'
                 WHERE a.id = ANY({attempts_of("orphans", "o.lease_token = k.lease_token")})
                   AND a.outcome = {S.RUNNING}
            ),""",
    moved=f"""UPDATE {JOB} j
                   SET status = CASE WHEN j.attempts >= j.max_attempts THEN {S.DEAD} ELSE {S.PENDING} END,
                       finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
                       run_at = now(), lease_token = NULL, lease_expires_at = NULL, updated_at = now(),
                       last_error = 'claim commit was not acknowledged; the worker released the job'
                  FROM orphans
                 WHERE j.id = ANY(ARRAY(SELECT id FROM orphans))
                   AND j.id = orphans.id AND j.lease_token = orphans.lease_token
             RETURNING j.id, j.status, j.workflow_id""",
    change=door.Change.ENDED,
    tail=f"SELECT id, {door.recheck()} FROM moved",
)


def release_unacknowledged(*, worker_id: str, known: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """Put back jobs this worker claimed in a transaction whose commit it never heard about.

    When the connection drops during the claim's COMMIT, the claim may have committed: the
    jobs are RUNNING under our worker id with tokens we never received. Worker ids are unique
    per process, so every such row is ours; requeue it now instead of waiting for its lease.
    Attempts stay counted: the claim happened.
    """
    with db.atomic(), db.cursor() as cursor:
        rows = door.run(cursor, _RELEASE_SQL, (worker_id, [str(t) for t in known]))
        return [row[0] for row in rows]


_STORE_RETURNS_SQL = f"""
            INSERT INTO {RETURN_VALUE} (job_id, value)
            SELECT id, value::jsonb FROM unnest(%s::uuid[], %s::text[]) AS r(id, value)
            ON CONFLICT (job_id) DO UPDATE SET value = EXCLUDED.value
            """


def _store_returns(finishes: Sequence[Finish]) -> None:
    """Inside the finish transaction: keep the return values of the attempts that passed the fence."""
    with db.cursor() as cursor:
        db.run(
            cursor,
            _STORE_RETURNS_SQL,
            ([f.job_id for f in finishes], [json.dumps(f.return_value) for f in finishes]),
        )


# The run_at of a job that waits for an event with no timeout: the latest time Python can read back.
NEVER = "'9999-12-31 00:00:00+00'::timestamptz"


# What a finish row becomes. A retry or a snooze (PENDING) of a job an operator asked to cancel ends
# CANCELLED; so does a park (WAITING: job.wait_for). A park becomes WAITING only where it holds the
# event's lock (v.locked, taken in a statement of its own before: reliableq.queue.events) and the event
# is not there; else PENDING: at once (the event is there), or in a second (an emit held the lock).
_PARKS = f"""
               status = CASE WHEN v.status IN ({S.PENDING}, {S.WAITING}) AND j.cancel_requested_at IS NOT NULL
                             THEN {S.CANCELLED}
                             WHEN v.status <> {S.WAITING} THEN v.status
                             WHEN v.locked AND NOT EXISTS (SELECT 1 FROM {EVENT} e WHERE e.name = v.wait)
                             THEN {S.WAITING}
                             ELSE {S.PENDING} END,
               run_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN j.run_at
                             WHEN v.status = {S.PENDING} THEN now() + make_interval(secs => v.delay)
                             WHEN v.status <> {S.WAITING} THEN j.run_at
                             WHEN NOT v.locked THEN now() + interval '1 second'
                             WHEN EXISTS (SELECT 1 FROM {EVENT} e WHERE e.name = v.wait) THEN now()
                             WHEN v.delay < 0 THEN {NEVER}
                             ELSE now() + make_interval(secs => v.delay) END,
               waiting_for = CASE WHEN v.status = {S.WAITING} AND j.cancel_requested_at IS NULL AND v.locked
                                   AND NOT EXISTS (SELECT 1 FROM {EVENT} e WHERE e.name = v.wait) THEN v.wait END,
               finished_at = CASE WHEN v.status IN ({S.PENDING}, {S.WAITING}) AND j.cancel_requested_at IS NULL
                                  THEN NULL ELSE now() END,"""
_PLAIN = f"""
               status = CASE WHEN v.status = {S.PENDING} AND j.cancel_requested_at IS NOT NULL
                             THEN {S.CANCELLED} ELSE v.status END,
               run_at = CASE WHEN v.status = {S.PENDING} AND j.cancel_requested_at IS NULL
                             THEN now() + make_interval(secs => v.delay) ELSE j.run_at END,
               finished_at = CASE WHEN v.status = {S.PENDING} AND j.cancel_requested_at IS NULL
                                  THEN NULL ELSE now() END,"""


@functools.cache
def _finish_sql(members: bool, parks: bool = False, progress: bool = False, succeeded: bool = False) -> str:
    """The finish's statement, made once per shape (`members`: some of the jobs are a workflow's;
    `succeeded`: every one of those members succeeded, so their ends doom nothing (graph.ended);
    `parks`: some wait for an event, and record their wait's timeout as the step of that name;
    `progress`: some carry the handler's last progress report, written with the end).

    Each attempt takes its values from `closing` by a subquery, not by a join: a join to the
    attempts could be planned as a scan of them for each row of `closing`."""
    sets = _PARKS if parks else _PLAIN
    waits = ", r ->> 7 AS wait, (r ->> 8)::bool AS locked" if parks else ""
    if progress:  # the row's last element: a report, or JSON null for a job that made none
        waits += f", NULLIF(r -> {9 if parks else 7}, 'null'::jsonb) AS progress"
        sets += "\n               progress = COALESCE(v.progress || jsonb_build_object('at', now()), j.progress),"
    park_columns = ", j.waiting_for, v.delay, j.attempts" if parks else ""
    # A park's wait, as a step: its timeout ({"until": epoch seconds}), kept by a later park of the same wait.
    recorded = (
        f""",
    waits AS (
        INSERT INTO {STEP} (job_id, name, kind, value, attempt, created_at, updated_at)
        SELECT m.id, m.waiting_for, '{StepKind.EVENT}',
               jsonb_build_object('until', CASE WHEN m.delay < 0 THEN NULL
                                                ELSE extract(epoch FROM now()) + m.delay END), m.attempts, now(), now()
          FROM moved m WHERE m.waiting_for IS NOT NULL
        ON CONFLICT (job_id, name) DO NOTHING
    )"""
        if parks
        else ""
    )
    return door.statement(
        "finish" if members else "finish_jobs",
        head=f"""v AS (
        SELECT (r ->> 0)::uuid AS id, (r ->> 1)::uuid AS token, r ->> 2 AS status, r ->> 3 AS outcome,
               r ->> 4 AS error, (r ->> 5)::float8 AS delay, r ->> 6 AS traceback{waits}
          FROM jsonb_array_elements(%s::jsonb) AS r
    ),""",
        moved=f"""UPDATE {JOB} j
           SET {sets}
               max_attempts = j.max_attempts + CASE WHEN v.outcome = {S.SNOOZED}
                                                     AND j.cancel_requested_at IS NULL THEN 1 ELSE 0 END,
               snoozes = j.snoozes + CASE WHEN v.outcome = {S.SNOOZED}
                                          AND j.cancel_requested_at IS NULL THEN 1 ELSE 0 END,
               lease_token = NULL,
               lease_expires_at = NULL,
               last_error = v.error,
               updated_at = now()
          FROM v
         WHERE j.id = ANY(ARRAY(SELECT id FROM v)) AND {RUNNING_FENCE}
           AND j.id = v.id AND j.lease_token = v.token
     RETURNING j.id, v.token,
               CASE WHEN j.status = {S.CANCELLED} THEN {S.CANCELLED} ELSE v.outcome END AS outcome,
               v.error, v.traceback, j.status, j.workflow_id{park_columns}""",
        change=door.Change.ENDED,
        members=members,
        succeeded=succeeded,
        tail=f"""{recorded},
    closing AS MATERIALIZED (
        SELECT o.id, moved.outcome, moved.error, moved.traceback FROM moved CROSS JOIN LATERAL (
            SELECT o.id FROM {ATTEMPT} o WHERE o.job_id = moved.id AND o.lease_token = moved.token
             ORDER BY o.number DESC LIMIT 1) AS o
    )
    UPDATE {ATTEMPT} a
       SET (outcome, error, traceback, finished_at) = (
               SELECT c.outcome, c.error, c.traceback, now() FROM closing c WHERE c.id = a.id)
     WHERE a.id = ANY(ARRAY(SELECT id FROM closing))
 RETURNING a.job_id, a.outcome, {door.recheck(members=members, succeeded=succeeded)}""",
    )


# Which of these events' locks this transaction holds now, taken without waiting (an emit in flight
# holds its event's lock until its transaction ends: the park then looks again a second later).
_PARK_LOCKS_SQL = f"""
    SELECT name FROM unnest(%s::text[]) AS name
     WHERE pg_try_advisory_xact_lock({lock_of("name")})
"""


def _by_job(finish: Finish) -> int:
    return finish.job_id.int  # the UUIDs' own order, compared as ints (UUID.__lt__ runs in Python)


def finish(finishes: Sequence[Finish]) -> FinishResult:
    """Write the end of many attempts in one fenced statement and one transaction.

    A job whose token no longer matches is left alone; its attempt is marked LEASE_LOST
    (unless the new owner already closed it as LEASE_EXPIRED, or a timeout closed it).
    """
    result = FinishResult()
    if not finishes:
        return result
    # A member that did not succeed may cancel up to graph.WALK dependents in its statement: the
    # other ends of the batch commit first, in a statement of their own, and never wait for that.
    failing = [f for f in finishes if f.workflow and f.status not in (JobStatus.SUCCEEDED, JobStatus.WAITING)]
    if failing and len(failing) < len(finishes):
        first = finish([f for f in finishes if f not in failing])
        then = finish(failing)
        return FinishResult(
            finalized=first.finalized + then.finalized,
            lost=first.lost + then.lost,
            cancelled=first.cancelled | then.cancelled,
        )
    # The rows as one JSON text: psycopg dumps a list parameter element by element in Python, seven
    # lists of a batch's ends cost more than the job's own work; json.dumps is one call in C. Sorted
    # by job id, the order in which a plan scanning their index meets them.
    parks = sorted({f.waiting_for for f in finishes if f.waiting_for is not None})
    # One statement is atomic on its own: in autocommit it costs one round trip, not three (BEGIN,
    # the statement, COMMIT). A transaction only where more must commit with it: kept return values
    # (fenced by the same statement), the locks of parks, or the crash point between the write and
    # its commit.
    members = any(f.workflow for f in finishes)
    reports = any(f.progress is not None for f in finishes)
    together = (
        members or bool(parks) or any(f.keeps_return for f in finishes) or bool(reliableq_settings.FAULT_INJECTION)
    )
    with db.atomic() if together else contextlib.nullcontext():
        if members:  # a statement with the graph's walk (door.run)
            db.without_jit()
        locked: set[str] = set(row[0] for row in db.fetch(_PARK_LOCKS_SQL, [parks])) if parks else set()
        ordered = sorted(finishes, key=_by_job)
        # Each end's row of the statement's JSON (`v`), its first seven elements; written out here, not
        # by a call a job: the usual batch makes no list beyond each end's own.
        ends = [
            [f.job_id.hex, f.lease_token.hex, f.status, f.outcome, f.error, float(f.delay), f.traceback]
            for f in ordered
        ]
        if parks or reports:  # the columns of the statement's other shapes, in its order
            for end, f in zip(ends, ordered, strict=True):
                if parks:
                    end += (f.waiting_for, f.waiting_for in locked)
                if reports:
                    end.append(f.progress)
        # A batch of members' successes (the usual one: failing members are finished apart, above)
        # takes the statement without the walk of what a failure dooms.
        succeeded = members and not parks and all(f.status == JobStatus.SUCCEEDED for f in finishes if f.workflow)
        rows = db.fetch(_finish_sql(members, bool(parks), reports, succeeded), [json.dumps(ends)])
        if members:  # else the recheck column is false on every row
            door.follow(rows, succeeded=succeeded)
        result.cancelled = {job_id for job_id, outcome, _ in rows if outcome == Outcome.CANCELLED}
        # A batch holds one end per job, so a row for each means every one passed the fence.
        if len(rows) == len(finishes):
            result.finalized = [f.job_id for f in finishes]
            finalized: set[uuid.UUID] | None = None
        else:
            finalized = {job_id for job_id, _, _ in rows}
            result.finalized = [f.job_id for f in finishes if f.job_id in finalized]

        def passed(f: Finish) -> bool:
            return finalized is None or f.job_id in finalized

        kept = [f for f in finishes if f.keeps_return and passed(f)]
        if kept:
            _store_returns(kept)
        lost = [] if finalized is None else [(f.job_id, f.lease_token) for f in finishes if f.job_id not in finalized]
        if lost:
            mark_lost(lost, reason="lease lost before finalize: another owner has the job")
            result.lost = [job_id for job_id, _ in lost]
        # The third failure window: the finalize is written but not yet committed.
        faults.crash_point("during_finalize")
    return result
