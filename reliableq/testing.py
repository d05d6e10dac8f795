"""Test your handlers without a worker process: run due jobs in this process, on the real database.

    from reliableq.testing import run_due, drain

    def test_welcome_email_is_sent(db):
        reliableq.enqueue("email.welcome", {"user_id": 7})
        [ran] = run_due()
        assert ran.status == "SUCCEEDED"

Jobs go through the same claim, handler call and fenced finish as under `runworker` (leases,
attempts, retries with backoff, DEAD after the budget), only in the calling thread and inside the
caller's transaction, so pytest-django's `db` fixture rolls everything back. `drain()` keeps
going, making retries due at once, until nothing it ran is left PENDING.

With pytest, load it as a plugin (`-p reliableq.testing` in addopts, or `pytest_plugins =
["reliableq.testing"]` in the top-level conftest.py) for the fixtures `run_jobs` and `drain_jobs`,
both using pytest-django's `db`. (It imports Django models only when called, so it can load
before Django is set up.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

WORKER_ID = "reliableq.testing"


@dataclass(frozen=True, slots=True, kw_only=True)
class Ran:
    """One attempt run in-process, and where it left its job."""

    job_id: uuid.UUID
    kind: str
    attempt: int
    outcome: str  # the attempt's outcome: SUCCEEDED, FAILED_TRANSIENT, FAILED_PERMANENT, ...
    status: str  # the job's status after it: SUCCEEDED, PENDING (a retry is due later) or DEAD
    error: str  # the stored, redacted error ("" on success)
    return_value: Any  # what the handler returned (kept in the database only for keep_return handlers)


def run_due(queues: Sequence[str] | None = None, *, limit: int = 100, lease_seconds: float = 30.0) -> list[Ran]:
    """Claim up to `limit` due jobs of `queues` (default: every queue), run each handler here, finish them."""
    from . import queue as jobqueue
    from . import registry
    from .queue import stats
    from .worker import executor

    queues = tuple(queues) if queues is not None else tuple(stats.queues())
    if not queues:
        return []
    claimed, _ = jobqueue.claim(
        worker_id=WORKER_ID, queues=queues, limit=limit, lease_seconds=lease_seconds, limits=registry.limits()
    )
    ran = []
    for job in claimed:
        result = executor.run_attempt(job)
        jobqueue.finish([result.finish])
        while jobqueue.cascade()[0]:  # what a worker's completer does next: the rest of a long cancel
            pass
        ran.append(
            Ran(
                job_id=job.id,
                kind=job.kind,
                attempt=job.attempt,
                outcome=result.finish.outcome,
                status=result.finish.status,
                error=result.finish.error,
                return_value=result.value,
            )
        )
    return ran


def drain(queues: Sequence[str] | None = None, *, max_rounds: int = 100) -> list[Ran]:
    """Run due jobs until none of the jobs run is PENDING any more; retries are made due at once.

    A job that keeps failing ends DEAD after its budget, as under a worker; `max_rounds` bounds
    the loop for a handler that enqueues jobs forever.
    """
    everything: list[Ran] = []
    for _ in range(max_rounds):
        ran = run_due(queues)
        if not ran:
            return everything
        everything += ran
        _due_now(r.job_id for r in ran if r.status == "PENDING")
    raise RuntimeError(f"drain() still had due jobs after {max_rounds} rounds.")


def _due_now(job_ids: Iterable[uuid.UUID]) -> None:
    """Skip the backoff of retries this module just scheduled."""
    from django.db.models.functions import Now

    from .models import Job, JobStatus

    Job.objects.filter(pk__in=list(job_ids), status=JobStatus.PENDING).update(run_at=Now())


try:  # the fixtures, for projects that test with pytest and pytest-django
    import pytest
except ImportError:  # pragma: no cover - pytest is not a dependency of the package
    pass
else:

    @pytest.fixture
    def run_jobs(db: None) -> Any:
        """run_due, on the test database."""
        return run_due

    @pytest.fixture
    def drain_jobs(db: None) -> Any:
        """drain, on the test database."""
        return drain
