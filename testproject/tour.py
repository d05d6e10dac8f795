"""The operator's tour (manage.py demo --serve): after the kill -9 proof, leave something to look at.

A real worker runs jobs of kinds that fail on purpose until some of them are DEAD with a real
attempt history, a queue that no worker serves holds a backlog, and an operator account (staff,
not superuser, a password generated now) can log in to the admin to filter, read and replay.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import reliableq
from reliableq.models import Job, JobStatus
from testproject import accounts

OPERATOR = "operator"
WORK_QUEUE = "default"
# No worker serves this queue: its jobs wait, as a paused queue's would.
IDLE_QUEUE = "emails"
BACKLOG = 25
# While the tour runs, one more job every TRICKLE_SECONDS on each queue keeps the charts moving.
TRICKLE_SECONDS = 20.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    kind: str
    payloads: list[dict[str, object]]
    max_attempts: int | None = None
    why: str  # what the operator will find, printed as the jobs are submitted


# test.flaky fails its first payload["failures"] attempts: with a budget of 3 and failures=3 it
# dies, and a replay (which grants the kind's budget again) succeeds on attempt 4, as a job does
# once the provider that was down is back.
BATCHES = [
    Batch(
        kind="test.flaky",
        max_attempts=3,
        why="DEAD after 3 failed attempts; a replay succeeds",
        payloads=[
            {"failures": 3, "order": 1001, "note": "the payment provider was down"},
            {"failures": 3, "order": 1002, "note": "the payment provider was down"},
        ],
    ),
    Batch(
        kind="test.always_fails",
        why="DEAD after 3 attempts; a replay fails again",
        payloads=[{"order": 1003, "note": "a bug no retry fixes"}],
    ),
    Batch(
        kind="test.permanent",
        why="DEAD at once: PermanentError, its secret redacted from the error",
        payloads=[{"order": 1004}],
    ),
    Batch(
        kind="test.flaky",
        why="SUCCEEDED on the second attempt",
        payloads=[{"failures": 1, "order": 1005}, {"failures": 1, "order": 1006}],
    ),
    Batch(
        kind="test.sleep",
        why="SUCCEEDED after 0.2 to 0.8 s (the dashboard's p95)",
        payloads=[{"seconds": s} for s in (0.2, 0.4, 0.6, 0.8)],
    ),
    Batch(kind="demo.noop", why="SUCCEEDED", payloads=[{"n": n} for n in range(12)]),
]


def operator_account() -> tuple[str, str]:
    """The operator's user name and a password generated for this run."""
    user, password = accounts.operator(OPERATOR)
    return user.get_username(), password


def submit_work(say: Callable[[str], None]) -> list[uuid.UUID]:
    """Enqueue BATCHES on WORK_QUEUE; return the jobs' ids."""
    ids = []
    for batch in BATCHES:
        for payload in batch.payloads:
            ids.append(reliableq.enqueue(batch.kind, payload, queue=WORK_QUEUE, max_attempts=batch.max_attempts).id)
        say(f"   {len(batch.payloads):2} x {batch.kind:18} {batch.why}")
    return ids


def wait_settled(ids: list[uuid.UUID], *, timeout: float) -> None:
    """Poll until none of `ids` is PENDING or RUNNING (TimeoutError after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while Job.objects.filter(id__in=ids, status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the tour's jobs did not settle within {timeout:g}s")
        time.sleep(0.2)


def dead_jobs(ids: list[uuid.UUID]) -> list[Job]:
    return list(Job.objects.filter(id__in=ids, status=JobStatus.DEAD).order_by("created_at"))


def fill_backlog() -> list[uuid.UUID]:
    """Leave BACKLOG jobs of this run waiting on IDLE_QUEUE; return their ids."""
    return [reliableq.enqueue("demo.noop", {"newsletter": n}, queue=IDLE_QUEUE).id for n in range(BACKLOG)]


def earlier(ids: list[uuid.UUID]) -> tuple[int, int]:
    """DEAD jobs and jobs waiting on IDLE_QUEUE that an earlier run left (.pgdata keeps them): the
    admin lists those too, so the printout says how many besides this run's."""
    others = Job.objects.exclude(id__in=ids)
    return (
        others.filter(status=JobStatus.DEAD).count(),
        others.filter(queue=IDLE_QUEUE, status=JobStatus.PENDING).count(),
    )


def trickle() -> None:
    """One more job for the worker and one more for the backlog."""
    reliableq.enqueue("demo.noop", {"tick": True}, queue=WORK_QUEUE)
    reliableq.enqueue("demo.noop", {"newsletter": "late"}, queue=IDLE_QUEUE)
