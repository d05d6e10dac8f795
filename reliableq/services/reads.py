"""Reads the worker, the admin and the commands share: is there work, which queues are paused."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Q
from django.db.models.functions import Now

from ..models import Job, JobStatus, QueueState


def has_work(queues: list[str] | tuple[str, ...]) -> bool:
    """Whether any job in these queues is due or running (what --burst waits for); the due jobs of
    a paused queue do not count, since no claim takes them."""
    paused = paused_queues(queues)
    return Job.objects.in_queues([q for q in queues if q not in paused]).unsettled().exists() or (
        bool(paused) and Job.objects.in_queues(list(paused)).filter(status=JobStatus.RUNNING).exists()
    )


def paused_queues(queues: Sequence[str] | None = None) -> set[str]:
    """The queues paused now, by database time (of `queues`, or all)."""
    found = QueueState.objects.filter(paused_at__isnull=False).filter(
        Q(paused_until__isnull=True) | Q(paused_until__gt=Now())
    )
    if queues is not None:
        found = found.filter(name__in=list(queues))
    return set(found.values_list("name", flat=True))
