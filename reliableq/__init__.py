"""ReliableQ: a durable PostgreSQL job queue for Django.

import reliableq

@reliableq.handler("email.welcome", max_attempts=5, timeout=30)
def send_welcome(job): ...

reliableq.enqueue("email.welcome", {"user_id": 7})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import Cancelled, InvalidJob, PermanentError, ReliableQError, Snooze, TransientError, UnknownKind
from .options import JobOptions
from .registry import handler

if TYPE_CHECKING:
    import uuid
    from collections.abc import Iterable

    from typing_extensions import Unpack

    from .models import Job, Workflow
    from .options import EnqueueOptions, ManyOptions
    from .schedules import ScheduleSpec
    from .workflows import WorkflowBuilder

__all__ = [
    "Cancelled",
    "InvalidJob",
    "JobOptions",
    "PermanentError",
    "ReliableQError",
    "Snooze",
    "TransientError",
    "UnknownKind",
    "cancel_workflow",
    "enqueue",
    "enqueue_many",
    "enqueue_on_commit",
    "handler",
    "schedule",
    "workflow",
]


def enqueue(kind: str, payload: dict[str, Any] | None = None, **options: Unpack[EnqueueOptions]) -> Job:
    """Store a job in the caller's transaction on the queue's database; return it (reliableq.services.enqueue)."""
    from .services import enqueue as _enqueue  # models load only once apps are ready

    return _enqueue(kind, payload, **options)


def enqueue_on_commit(
    kind: str, payload: dict[str, Any] | None = None, *, using: str | None = None, **options: Unpack[EnqueueOptions]
) -> None:
    """Enqueue once the caller's transaction on `using` commits (see reliableq.services.enqueue_on_commit)."""
    from .services import enqueue_on_commit as _enqueue_on_commit

    _enqueue_on_commit(kind, payload, using=using, **options)


def enqueue_many(
    kind: str, payloads: Iterable[dict[str, Any] | None], **options: Unpack[ManyOptions]
) -> list[uuid.UUID]:
    """Store many jobs of one kind with one INSERT in the caller's transaction (see reliableq.services.enqueue_many)."""
    from .services import enqueue_many as _enqueue_many

    return _enqueue_many(kind, payloads, **options)


def workflow(name: str = "") -> WorkflowBuilder:
    """A builder of jobs that run in order, with callbacks that fire once per run (reliableq.workflows)."""
    from .workflows import workflow as _workflow

    return _workflow(name)


def cancel_workflow(workflow_id: uuid.UUID | str, *, by: Any = None) -> Workflow:
    """Cancel a RUNNING workflow's WAITING and PENDING members; ask its RUNNING ones to stop."""
    from .workflows import cancel_workflow as _cancel_workflow

    return _cancel_workflow(workflow_id, by=by)


def schedule(
    name: str,
    *,
    cron: str,
    kind: str | None = None,
    payload: dict[str, Any] | None = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    overlap: str = "allow",
    queue: str = "default",
    priority: int = 0,
) -> ScheduleSpec:
    """Declare a schedule in a jobs.py: each slot of `cron` in `timezone` makes one job of `kind`
    (default `name`), fleet-wide (see reliableq.schedules.schedule)."""
    from .schedules import schedule as _schedule

    return _schedule(
        name, cron=cron, kind=kind, payload=payload, timezone=timezone, catch_up=catch_up, overlap=overlap,
        queue=queue, priority=priority,
    )  # fmt: skip
