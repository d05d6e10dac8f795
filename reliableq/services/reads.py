"""Reads the worker, the admin and the commands share: is there work, which queues are paused."""

from __future__ import annotations

from ..models import Job, JobStatus
from ..queue.stats import paused_queues


def has_work(queues: list[str] | tuple[str, ...]) -> bool:
    """Whether any job in these queues is due or running (what --burst waits for); the due jobs of
    a paused queue do not count, since no claim takes them."""
    paused = paused_queues(queues)
    return Job.objects.in_queues([q for q in queues if q not in paused]).unsettled().exists() or (
        bool(paused) and Job.objects.in_queues(list(paused)).filter(status=JobStatus.RUNNING).exists()
    )
