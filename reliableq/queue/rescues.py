"""Taking back expired leases: close the open attempt, requeue, bury or cancel the job."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

from ..floors import RescueFloor
from ..models import JobStatus
from . import db, door
from .enqueue import CHANNEL
from .pick import Floor
from .records import Rescued
from .sql import ATTEMPT, JOB, S, attempts_of, filter_only

logger = logging.getLogger("reliableq.queue")


RESCUE_BATCH = 100
_NOW_SQL = "SELECT now()"  # the rescue's database time, for the floor


def rescue(floor: RescueFloor | None = None) -> list[Rescued]:
    """Take back expired leases in every queue, one batch, in a transaction of its own.

    The fleet's maintenance leader calls this once per interval (reliableq.worker.maintenance);
    claims then need no rescue of their own. With `floor` (the leader's), the lease index is
    read from the floor, or from its start when a sweep is due (reliableq.floors).
    """
    if floor is None:
        with db.atomic():
            return rescue_expired(())
    sweep = floor.sweeping()
    began = time.monotonic()
    with db.atomic():
        with db.cursor() as cursor:
            cursor.execute(_NOW_SQL)
            at = cursor.fetchone()[0]
        rescued = rescue_expired((), since=floor.bound(sweep=sweep))
    floor.rescued(at=at, complete=len(rescued) < RESCUE_BATCH, sweep=sweep, began=began)
    return rescued


def rescue_expired(queues: Sequence[str], since: Any = None) -> list[Rescued]:
    """Take back RUNNING jobs whose lease ran out: close the open attempt, requeue or bury.

    Runs inside the claim transaction, so a requeued job can be claimed by the very next
    statement. Attempts are counted at claim, so a job that kills its worker every time
    still spends its budget and ends DEAD here.
    """
    sql, params = rescue_sql(tuple(queues), since is not None)
    with db.cursor() as cursor:
        rows = door.run(cursor, sql, tuple(since if p is _SINCE else p for p in params))
        rescued = [Rescued(*row[:4]) for row in rows]
    for r in rescued:
        fate: dict[str, str] = {JobStatus.DEAD: "buried: no attempts left", JobStatus.CANCELLED: "cancelled on request"}
        logger.warning(
            "job=%s attempt=%s lease expired (worker %s); %s",
            r.job_id,
            r.attempt,
            r.previous_worker,
            fate.get(r.status, "requeued"),
        )
    return rescued


_SINCE = Floor("", -1)  # where the floored rescue's bound goes in the compiled statement, filled in per call


@functools.lru_cache(maxsize=256)
def rescue_sql(queues: tuple[str, ...], floored: bool = False) -> tuple[str, tuple[Any, ...]]:
    """The rescue statement for these queues, compiled once (time is in the SQL, not the parameters).

    No join reaches either table: each is read by key, so no statistics can turn the statement
    into a nested loop over a whole index. A job has at most one open attempt (a claim opens one
    only for a PENDING job, and every way out of RUNNING closes it), so the attempt closed is the
    job's newest, if still RUNNING. The job's worker_id is not changed here, so RETURNING
    j.worker_id is the owner whose lease ran out. `floored`: only leases that expired at or after
    the first parameter (a RescueFloor's bound), so the lease index is read from there. A requeued
    job wakes the workers listening on its queue, as an enqueue does (one notification a queue per
    transaction: PostgreSQL folds identical ones): the leader that rescues it may not serve its queue,
    and the others would otherwise find it only at their next poll.
    """
    # Ordered by the lease index's own column, so the batch is the lease index's first rows. The
    # queues are a filter only: the admin's (queue, created_at) index must not be read for them.
    since = f" AND {JOB}.lease_expires_at >= (%s)::timestamptz" if floored else ""
    among = f" AND {filter_only(f'{JOB}.queue = ANY(%s)')}" if queues else ""  # none: every queue (the leader's)
    expired_sql = f"""SELECT {JOB}.id FROM {JOB}
         WHERE {JOB}.status = {S.RUNNING} AND {JOB}.lease_expires_at <= statement_timestamp(){since}{among}
         ORDER BY {JOB}.lease_expires_at LIMIT {RESCUE_BATCH} FOR UPDATE SKIP LOCKED"""
    expired_params = (*((_SINCE,) if floored else ()), *(([*queues],) if queues else ()))
    return (
        door.statement(
            "rescue_floored" if floored else "rescue",
            head=f"""expired AS MATERIALIZED ({expired_sql}),
            closed AS (
                UPDATE {ATTEMPT} a
                   SET outcome = {S.LEASE_EXPIRED},
                       finished_at = now(),
                       error = format('lease expired: worker %%s stopped renewing it', a.worker_id)
                 WHERE a.id = ANY({attempts_of("expired", f"o.outcome = {S.RUNNING}")}) AND a.outcome = {S.RUNNING}
            ),""",
            moved=f"""UPDATE {JOB} j
                   SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN {S.CANCELLED}
                                     WHEN j.attempts >= j.max_attempts THEN {S.DEAD} ELSE {S.PENDING} END,
                       run_at = CASE WHEN j.attempts >= j.max_attempts OR j.cancel_requested_at IS NOT NULL
                                     THEN j.run_at ELSE now() END,
                       finished_at = CASE WHEN j.attempts >= j.max_attempts OR j.cancel_requested_at IS NOT NULL
                                          THEN now() END,
                       lease_token = NULL,
                       lease_expires_at = NULL,
                       last_error = format(
                           'lease of attempt %%s/%%s expired: worker %%s stopped renewing it%%s',
                           j.attempts, j.max_attempts, j.worker_id,
                           CASE WHEN j.cancel_requested_at IS NOT NULL THEN '; cancelled on request'
                                WHEN j.attempts >= j.max_attempts THEN '; no attempts left' ELSE '' END),
                       updated_at = now()
                 WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
             RETURNING j.id, j.attempts, j.status, j.worker_id, j.workflow_id, j.queue""",
            change=door.Change.ENDED,
            tail=f"""SELECT id, attempts, status, worker_id,
                   CASE WHEN status = {S.PENDING} THEN pg_notify('{CHANNEL}', queue) END, {door.recheck()}
              FROM moved""",
        ),
        expired_params,
    )
