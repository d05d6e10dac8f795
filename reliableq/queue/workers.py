"""The workers panel's rows: each worker process reports itself through its heartbeat."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django.db.models import BooleanField, ExpressionWrapper, F, Q
from django.db.models.functions import Now

from ..models import Worker
from . import db
from .stats import QueueSummary

WORKER = Worker._meta.db_table
GONE_DAYS = 1  # rows of workers not seen for this long are deleted by the maintenance leader


def package_version() -> str:
    try:
        return version("django-reliableq")
    except PackageNotFoundError:
        return ""


def started(*, worker_id: str, queues: Sequence[str], concurrency: int, isolation: str, lease_seconds: float) -> None:
    """Record (or reset) this worker's row as it starts."""
    Worker.objects.update_or_create(
        id=worker_id,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(queues),
            "concurrency": concurrency,
            "busy": 0,
            "isolation": isolation,
            "version": package_version(),
            "lease_seconds": lease_seconds,
            "started_at": Now(),
            "last_seen_at": Now(),
            "stopped_at": None,
        },
    )


_SEEN_SQL = f"UPDATE {WORKER} SET last_seen_at = now(), busy = %s WHERE id = %s"


def seen(worker_id: str, busy: int) -> bool:
    """One statement per beat: the worker is alive, with `busy` slots in use; False if it has no row."""
    with db.cursor() as cursor:
        cursor.execute(_SEEN_SQL, [busy, worker_id])
        return bool(cursor.rowcount)


def stopped(worker_id: str) -> None:
    Worker.objects.filter(pk=worker_id).update(stopped_at=Now(), last_seen_at=Now(), busy=0)


def is_live() -> Q:
    """Seen within its lease (by the database's clock) and not stopped."""
    return Q(stopped_at__isnull=True, last_seen_at__gt=Now() - F("lease_seconds") * dt.timedelta(seconds=1))


def live() -> Any:
    """Workers seen within their lease and not stopped."""
    return Worker.objects.filter(is_live())


def with_state() -> Any:
    """Every worker row, each with `live` (a boolean the database computes)."""
    return Worker.objects.annotate(live=ExpressionWrapper(is_live(), output_field=BooleanField()))


def served_queues() -> set[str]:
    """The queues some live worker serves."""
    return {queue for queues in live().values_list("queues", flat=True) for queue in queues}


def unserved(summaries: Sequence[QueueSummary], served: set[str] | None = None) -> set[str]:
    """Of these queues, those with due jobs that no live worker serves (a paused queue waits on purpose);
    `served`: served_queues(), when the caller read it already."""
    waiting = [q.name for q in summaries if q.oldest_due_age_seconds > 0 and not q.paused]
    if not waiting:
        return set()
    served = served_queues() if served is None else served
    return {name for name in waiting if name not in served}


def prune() -> int:
    """Delete the rows of workers gone (not seen) for GONE_DAYS."""
    deleted, _ = Worker.objects.filter(last_seen_at__lt=Now() - dt.timedelta(days=GONE_DAYS)).delete()
    return int(deleted)
