"""Small readers shared by the acceptance tests: committed state, read through the ORM."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from reliableq.models import Attempt, Job
from reliableq.queue import db


def job(job_id: uuid.UUID) -> Job:
    return Job.objects.get(pk=job_id)


def attempts(job_id: uuid.UUID) -> list[Attempt]:
    return list(Attempt.objects.filter(job_id=job_id).order_by("number"))


def is_status(job_id: uuid.UUID, status: str, *, worker_id: str | None = None) -> Callable[[], bool]:
    """A predicate for wait_until: the job has `status` (and, if given, is owned by `worker_id`)."""

    def check() -> bool:
        row = Job.objects.filter(pk=job_id).values("status", "worker_id").get()
        return row["status"] == status and (worker_id is None or row["worker_id"] == worker_id)

    return check


def db_now() -> dt.datetime:
    """The database clock, the one every lease and attempt timestamp comes from."""
    with db.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def max_in_flight(intervals: Iterable[tuple[dt.datetime, dt.datetime]]) -> int:
    """The largest number of [start, end) intervals that overlap at one instant."""
    events: list[tuple[dt.datetime, int]] = []
    for start, end in intervals:
        assert end is not None and start <= end, (start, end)
        events += [(start, 1), (end, -1)]
    events.sort()  # at one instant an end (-1) sorts before a start (+1)
    current = best = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


def owner_of(job_id: uuid.UUID, status: str = "RUNNING") -> Callable[[], str]:
    """A predicate for wait_until: the worker_id of the job once it has `status`, else ''."""

    def check() -> str:
        row = Job.objects.filter(pk=job_id).values("status", "worker_id").get()
        return row["worker_id"] if row["status"] == status else ""

    return check


def start_idle(spawn_worker: Callable[..., Any], n: int, *args: str, **kwargs: Any) -> dict[str, Any]:
    """Start `n` workers and wait until each is polling; return them by worker id."""
    workers = [spawn_worker(*args, **kwargs) for _ in range(n)]
    for w in workers:
        w.wait_for_output(" started: ", timeout=30)
    return {w.args[w.args.index("--worker-id") + 1]: w for w in workers}
