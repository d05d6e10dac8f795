"""Operator actions: replay, cancel, pause and resume, each audited when a user asks."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db.models.functions import Now

from .. import audit, registry, rules
from ..conf import reliableq_settings
from ..errors import WrongStatus
from ..models import Job, JobStatus, QueueState
from ..queue import db, operations
from ..queue import enqueue as statements
from ..queue import workflows as graph
from .enqueueing import _holder, default_max_attempts

REPLAYED = "Replayed: back to PENDING with the same id and effect key."
REPLAYED_FROM_THE_START = "Replayed from the start: its steps and checkpoints forgotten, back to PENDING."
CANCELLED = "Cancelled."
CANCEL_REQUESTED = "Cancel requested: the running handler is asked to stop."
PAUSED = "Paused"
RESUMED = "Resumed."


@db.retry_deadlocks
def replay(job_id: uuid.UUID | str, *, by: Any = None, restart: bool = False) -> Job:
    """Send a DEAD job back to PENDING: same id, same effect key, history kept, a fresh budget; its
    recorded steps and checkpoints kept (it resumes after them), or forgotten first with `restart`.

    Attempt numbers keep counting across replays, so the budget grows by the kind's default
    instead of `attempts` going back to zero. With `by` (a user), the change is audited in the
    same transaction, whichever way in (admin or API) it came.
    """
    with db.atomic():
        job: Job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != JobStatus.DEAD:
            raise WrongStatus(job, JobStatus.DEAD)
        budget = _budget_for(job.kind, job.max_attempts)
        if job.unique_key is not None and _holder(job.kind, job.dedupe_scope, None, job.unique_key) is not None:
            raise WrongStatus(
                job, JobStatus.DEAD, f"Job {job.id} has unique_key {job.unique_key!r}; another job with it is active."
            )
        operations.reopen(job.pk, max_attempts=job.attempts + budget, restart=restart)
        statements.notify(job.queue)
        job.refresh_from_db()
        if by is not None:
            audit.record(by, job, REPLAYED_FROM_THE_START if restart else REPLAYED)
    return job


def _budget_for(kind: str, fallback: int) -> int:
    try:
        return default_max_attempts(kind)
    except registry.UnknownKind:
        return max(1, min(fallback, int(reliableq_settings.MAX_ATTEMPTS)))


@db.retry_deadlocks
def cancel(job_id: uuid.UUID | str, *, by: Any = None) -> Job:
    """Withdraw a PENDING job (or a workflow's WAITING member) so that no worker ever claims it; ask a
    RUNNING one to stop.

    A RUNNING job gets `cancel_requested_at`: its worker learns of it at its next lease renewal
    and sets `job.cancel_requested`; the handler that then raises Cancelled (or fails) ends the
    job CANCELLED, one that succeeds anyway keeps its success. Row locks order this against the
    finish, so a cancel racing a success leaves exactly one final state: the cancel finds the
    job finished (WrongStatus), or the finish finds the request. Audited when `by` is given.
    """
    with db.atomic():
        job: Job = Job.objects.select_for_update().get(pk=job_id)
        if job.status == JobStatus.RUNNING:
            if job.cancel_requested_at is not None:
                return job  # asked already: one request, one audit entry
            Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(cancel_requested_at=Now(), updated_at=Now())
            job.refresh_from_db()
            if by is not None:
                audit.record(by, job, CANCEL_REQUESTED)
            return job
        if job.status not in (JobStatus.PENDING, JobStatus.WAITING):
            raise WrongStatus(job, "WAITING, PENDING or RUNNING")
        operations.cancel_pending(job.pk)
        job.refresh_from_db()
        if by is not None:
            audit.record(by, job, CANCELLED)
    if job.workflow_id is not None:
        graph.drain()  # the dependents the cancel handed on, now, in short transactions of their own
    return job


def pause(queue: str, *, until: dt.datetime | None = None, by: Any = None) -> QueueState:
    """Stop claims from `queue` (until `until`, by database time, or until resumed); running jobs finish.

    Takes effect for every claim that starts after this commits: the claim reads the queue's
    state in the statement that picks its jobs.
    """
    rules.queue_name(queue)
    if until is not None:
        rules.run_at(until, field="until")
    with db.atomic():
        state: QueueState
        state, _ = QueueState.objects.select_for_update().get_or_create(name=queue)
        QueueState.objects.filter(name=queue).update(
            paused_at=Now(), paused_until=until, paused_by="" if by is None else by.get_username()
        )
        state.refresh_from_db()
        if by is not None:
            audit.record(by, state, PAUSED + (f" until {until.isoformat()}" if until else ""))
    return state


def resume(queue: str, *, by: Any = None) -> QueueState:
    """Let claims take jobs of `queue` again, and wake its idle workers at once (on commit)."""
    rules.queue_name(queue)
    with db.atomic():
        # A running queue needs no row: resuming deletes it, so a name paused once (or never used)
        # leaves nothing behind.
        QueueState.objects.filter(name=queue).delete()
        state = QueueState(name=queue)
        statements.notify(queue)
        if by is not None:
            audit.record(by, state, RESUMED)
    return state
