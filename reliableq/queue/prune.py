"""Deleting finished jobs (prunejobs, the maintenance leader's retention) and purging a queue's backlog.

Batches of short transactions, each picking its rows by an index under a LIMIT and deleting
everything that refers to them by key: no long locks, no cascade per row.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db.models.functions import Now

from .. import rules
from ..conf import reliableq_settings
from ..models import FINISHED, Attempt, BatchKey, QueueState, ReturnValue
from . import db, door, planguard
from .sql import COUNT, EDGE, EVENT, JOB, STEP, WORKFLOW, S

ATTEMPT = Attempt._meta.db_table
RETURN_VALUE = ReturnValue._meta.db_table
BATCH_KEY = BatchKey._meta.db_table


# A job of an unfinished workflow stays, whatever its age: its end is counted, and a replay may need it.
_KEPT_FOR_WORKFLOW = (
    f"(workflow_id IS NULL OR NOT EXISTS (SELECT 1 FROM {WORKFLOW} w"
    f" WHERE w.id = {JOB}.workflow_id AND w.status = {S.RUNNING}))"
)


_PRUNE_WORKFLOWS_SQL = f"""
            WITH gone AS MATERIALIZED (
                SELECT w.id FROM {WORKFLOW} w
                 WHERE w.status <> {S.RUNNING} AND w.finished_at IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM {JOB} j WHERE j.workflow_id = w.id)
                 ORDER BY w.finished_at LIMIT %s FOR UPDATE SKIP LOCKED
            ),
            edges AS (DELETE FROM {EDGE} e WHERE e.workflow = ANY(ARRAY(SELECT id FROM gone))),
            counts AS (DELETE FROM {COUNT} c WHERE c.workflow = ANY(ARRAY(SELECT id FROM gone))),
            deleted AS (DELETE FROM {WORKFLOW} w WHERE w.id = ANY(ARRAY(SELECT id FROM gone)) RETURNING 1)
            SELECT count(*) FROM deleted
            """


def prune_workflows(*, limit: int = 100) -> int:
    """Delete finished workflows none of whose jobs is left (with their edges and counts); return how many."""
    with db.atomic(), db.cursor() as cursor:
        cursor.execute(
            _PRUNE_WORKFLOWS_SQL,
            [limit],
        )
        return int(cursor.fetchone()[0])


# A batch of prune(): the oldest first, from the finished index, so that each batch reads only the rows
# it deletes. The status is checked on each row, never used to choose an index (the admin's status
# index would read every finished row; see reliableq.queue.sql.filter_only).
_PRUNE_BATCH_SQL = f"""
        SELECT id FROM {JOB}
         WHERE (status = ANY(%s)) IS TRUE AND finished_at < now() - make_interval(secs => %s) AND {_KEPT_FOR_WORKFLOW}
         ORDER BY finished_at
         LIMIT %s
           FOR UPDATE SKIP LOCKED
    """


_PRUNE_COUNT_SQL = (
    f"SELECT count(*) FROM {JOB}"
    " WHERE (status = ANY(%s)) IS TRUE AND finished_at < now() - make_interval(secs => %s)"
    f" AND {_KEPT_FOR_WORKFLOW}"
)


def prune(
    *,
    older_than: dt.timedelta,
    batch_size: int = 1000,
    progress: Callable[[int], None] | None = None,
    statuses: Sequence[str] = FINISHED,
    max_batches: int | None = None,
    dry_run: bool = False,
) -> int:
    """Delete finished jobs (and, by cascade, their attempts) in batches; return how many.

    With `dry_run`, delete nothing and return how many would be deleted.

    Each batch is its own short transaction (no long locks); with `max_batches`, stop after that
    many even if more are old enough (the maintenance leader's retention, a bounded share per round).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    if not set(statuses) <= set(FINISHED):
        raise ValueError(f"Only finished jobs can be pruned, not {sorted(set(statuses) - set(FINISHED))}.")
    params = ([str(s) for s in statuses], older_than.total_seconds(), batch_size)
    # Statistics that miss most of the old rows make a bitmap scan and a sort of all of them look
    # cheaper, for every batch; check once per run, and analyze if so (see planguard).
    planguard.keep_index(_PRUNE_BATCH_SQL, params, table=JOB, index="reliableq_job_finished")
    if dry_run:
        with db.cursor() as cursor:
            cursor.execute(
                _PRUNE_COUNT_SQL,
                params[:2],
            )
            return int(cursor.fetchone()[0])
    return delete_batches(_PRUNE_BATCH_SQL, params, batch_size=batch_size, progress=progress, max_batches=max_batches)


@functools.cache
def _delete_sql(batch_sql: str) -> str:
    """delete_batches' statement for the jobs `batch_sql` picks (_PRUNE_BATCH_SQL, _MEMBERS_KEPT)."""
    return f"""
                    WITH batch AS MATERIALIZED ({batch_sql}),
                    gone_attempts AS (
                        DELETE FROM {ATTEMPT} a WHERE a.id = ANY(ARRAY(
                            SELECT o.id FROM batch CROSS JOIN LATERAL (
                                SELECT o.id FROM {ATTEMPT} o
                                 WHERE o.job_id = batch.id AND o.number BETWEEN 0 AND 2147483647 OFFSET 0
                            ) AS o
                        ))
                    ),
                    gone_returns AS (
                        DELETE FROM {RETURN_VALUE} r WHERE r.job_id = ANY(ARRAY(SELECT id FROM batch))
                    ),
                    gone_steps AS (
                        DELETE FROM {STEP} s WHERE s.job_id = ANY(ARRAY(SELECT id FROM batch))
                    ),
                    gone_batch_keys AS (
                        DELETE FROM {BATCH_KEY} b WHERE b.job_id = ANY(ARRAY(SELECT id FROM batch))
                    )
                    DELETE FROM {JOB} j WHERE j.id = ANY(ARRAY(SELECT id FROM batch))
                    """


def delete_batches(
    batch_sql: str,
    params: Sequence[Any],
    *,
    batch_size: int,
    progress: Callable[[int], None] | None = None,
    max_batches: int | None = None,
) -> int:
    """Delete the jobs `batch_sql` picks (at most batch_size at a time), with everything that refers to them."""
    total = 0
    batches = 0
    while True:
        with db.atomic(), db.cursor() as cursor:
            # Attempts first, so one batch is one pass over each table, not a cascade per row;
            # every delete by key, never by a join to the batch (see the note in reliableq.queue). Each
            # job's attempts are read as one range of the (job_id, number) index: the whole range
            # of `number`, so every attempt, but written as a range so that even with no
            # statistics the planner expects a handful of rows per job, not a scan's worth.
            cursor.execute(
                _delete_sql(batch_sql),
                params,
            )
            deleted = int(cursor.rowcount)
        total += deleted
        batches += 1
        if progress is not None:
            progress(deleted)
        if deleted < batch_size or (max_batches is not None and batches >= max_batches):
            return total


PURGED = "Purged: cancelled by an operator with reliableq_queue purge."


_PENDING_OF_QUEUE = f"SELECT id FROM {JOB} WHERE status = {S.PENDING} AND queue = %s"
# A workflow's members are not deleted: their ends release others and are counted.
_MEMBERS_KEPT = f"{_PENDING_OF_QUEUE} AND workflow_id IS NULL LIMIT %s FOR UPDATE SKIP LOCKED"
# A batch of a queue's PENDING jobs cancelled (parameters: queue, batch size, the error to record).
PURGE_SQL = door.statement(
    "purge",
    head=f"batch AS MATERIALIZED ({_PENDING_OF_QUEUE} LIMIT %s FOR UPDATE SKIP LOCKED),",
    moved=f"""UPDATE {JOB} j SET status = {S.CANCELLED}, finished_at = now(), updated_at = now(), last_error = %s
                WHERE j.id = ANY(ARRAY(SELECT id FROM batch)) AND j.status = {S.PENDING}
            RETURNING j.id, j.status, j.workflow_id""",
    change=door.Change.ENDED,
    tail=f"SELECT id, {door.recheck()} FROM moved",
)


_PURGE_COUNT_SQL = f"SELECT count(*) FROM ({_PENDING_OF_QUEUE}) p"


def purge(
    queue: str,
    *,
    delete: bool = False,
    dry_run: bool = False,
    batch_size: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Cancel (or, with `delete`, delete) every PENDING job of `queue`, due or scheduled; return how many.

    For a backlog nobody will run (a flood on a queue no worker serves, say). RUNNING jobs are left
    to finish: cancel those one at a time (services.cancel). Batches of short transactions, through
    the due index's (queue, ...) prefix; rows a claim has locked are skipped, not waited for.
    """
    rules.queue_name(queue)
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    if dry_run:
        with db.cursor() as cursor:
            cursor.execute(_PURGE_COUNT_SQL, [queue])
            return int(cursor.fetchone()[0])
    if delete:
        return delete_batches(_MEMBERS_KEPT, [queue, batch_size], batch_size=batch_size, progress=progress)
    total = 0
    while True:
        with db.atomic(), db.cursor() as cursor:
            done = len(door.run(cursor, PURGE_SQL, [queue, batch_size, PURGED]))
        total += done
        if progress is not None:
            progress(done)
        if done < batch_size:
            return total


EVENTS = "EVENT"  # RETENTION_SECONDS' key for emitted events
DEFAULT_EVENT_SECONDS = 30 * 86400


_PRUNE_EVENTS_SQL = f"""DELETE FROM {EVENT} WHERE id = ANY(ARRAY(
                    SELECT id FROM {EVENT} WHERE emitted_at < now() - make_interval(secs => %s)
                     ORDER BY emitted_at LIMIT %s))"""


def prune_events(seconds: float | None, *, limit: int = 1000) -> int:
    """Delete events emitted more than `seconds` ago (None: keep them), a batch; return how many.

    A job that waits for an event pruned meanwhile waits for a new emit of its name."""
    if seconds is None:
        return 0
    with db.cursor() as cursor:
        cursor.execute(
            _PRUNE_EVENTS_SQL,
            [float(seconds), limit],
        )
        return int(cursor.rowcount)


RETENTION_BATCH = 1000  # rows per retention transaction
RETENTION_BUDGET_SECONDS = 0.25  # the most one retention round spends deleting


class Retained(dict[str, int]):
    """Rows deleted per status by one retention round; `more` when its time ran out before the old rows did."""

    more = False


def retain(budget_seconds: float = RETENTION_BUDGET_SECONDS) -> Retained:
    """Delete finished jobs past RETENTION_SECONDS for their status, in batches, for at most `budget_seconds`.

    The maintenance leader calls this every retention interval, and at its next tick again while
    `more` says old rows are left: a round is a quarter of a second of short transactions, so the
    leader's own claims wait little, and rounds back to back delete thousands of rows a second, more
    than a fleet finishes. `prunejobs` stays for manual use.
    """
    deadline = time.monotonic() + budget_seconds
    deleted = Retained()
    # Pauses that ended by themselves (paused_until passed) leave their row: a running queue needs none.
    QueueState.objects.filter(paused_until__lte=Now()).delete()
    from . import workers

    workers.prune()
    prune_workflows()
    retention = dict(reliableq_settings.RETENTION_SECONDS)
    events = prune_events(retention.pop(EVENTS, DEFAULT_EVENT_SECONDS))
    if events:
        deleted[EVENTS] = events
    for status, seconds in retention.items():
        if seconds is None:
            continue  # kept forever
        deleted[status] = 0
        while True:
            n = prune(
                older_than=dt.timedelta(seconds=float(seconds)),
                statuses=[status],
                batch_size=RETENTION_BATCH,
                max_batches=1,
            )
            deleted[status] += n
            if n < RETENTION_BATCH:
                break
            if time.monotonic() >= deadline:
                deleted.more = True
                break
    return deleted
