"""The three named failure windows, with a real worker killing itself at each one.

The three points run side by side, one queue each, so that the suite pays for one worker boot
and one lease expiry instead of three.
"""

from __future__ import annotations

import signal

import pytest

import reliableq
from reliableq.faults import ATTEMPT_POINTS as POINTS  # the attempt's windows; steps: test_steps.py
from reliableq.models import JobStatus, Outcome

from .helpers import attempts, job

# A worker killed at every fault point, one after another: minutes on a loaded machine, and its
# deadlines flake there (seen twice in CI); nightly (`pytest -m nightly`). The demo (tests/charges/test_demo.py)
# kills a worker mid-charge in CI.
pytestmark = [pytest.mark.slow, pytest.mark.nightly, pytest.mark.django_db(transaction=True)]

LEASE = "0.6"


def test_a_worker_killed_at_each_fault_point_is_recovered_by_another_with_one_finalization(spawn_worker):
    jobs = {point: reliableq.enqueue("demo.noop", {}, queue=f"fault-{point}") for point in POINTS}
    crashers = {
        point: spawn_worker(
            "--lease-seconds",
            LEASE,
            "--queues",
            f"fault-{point}",
            "--worker-id",
            f"crash-{point}",
            env={"RELIABLEQ_FAULT_INJECTION": "1", "RELIABLEQ_CRASH_AT": point},
        )
        for point in POINTS
    }
    for point, a in crashers.items():
        assert a.wait(timeout=30) == -signal.SIGKILL, f"{point}: {a.output()}"
        assert f"fault injection: SIGKILL at {point}" in a.output()

    for point, noop in jobs.items():
        # Whatever A did before dying is either committed ownership or nothing: at every point,
        # including inside the finalize transaction, the job is still A's and unfinished.
        crashed = job(noop.id)
        assert (crashed.status, crashed.worker_id, crashed.attempts) == (JobStatus.RUNNING, f"crash-{point}", 1), point
        assert crashed.finished_at is None and crashed.lease_token is not None, point
        [open_attempt] = attempts(noop.id)
        # For during_finalize this is the rollback: the finalize was written, then A died
        # before its COMMIT, and the attempt is not SUCCEEDED.
        assert (open_attempt.outcome, open_attempt.finished_at) == (Outcome.RUNNING, None), point

    b = spawn_worker(
        "--lease-seconds",
        LEASE,
        "--burst",
        "--queues",
        ",".join(f"fault-{p}" for p in POINTS),
        "--worker-id",
        "rescuer",
    )
    assert b.wait(timeout=30) == 0, b.output()
    for point, noop in jobs.items():
        done = job(noop.id)
        assert (done.status, done.worker_id, done.attempts) == (JobStatus.SUCCEEDED, "rescuer", 2), point  # A = 2
        rows = [(r.worker_id, r.outcome) for r in attempts(noop.id)]
        assert rows == [(f"crash-{point}", Outcome.LEASE_EXPIRED), ("rescuer", Outcome.SUCCEEDED)], point  # F = 1


def test_crash_at_is_ignored_when_fault_injection_is_off(spawn_worker):
    jobs = {point: reliableq.enqueue("demo.noop", {}, queue=f"off-{point}") for point in POINTS}
    workers = {
        point: spawn_worker(
            "--burst",
            "--queues",
            f"off-{point}",
            "--worker-id",
            f"w-{point}",
            env={"RELIABLEQ_FAULT_INJECTION": "0", "RELIABLEQ_CRASH_AT": point},
        )
        for point in POINTS
    }
    for point, worker in workers.items():
        assert worker.wait(timeout=30) == 0, f"{point}: {worker.output()}"
        assert "fault injection" not in worker.output()
        done = job(jobs[point].id)
        assert (done.status, done.attempts) == (JobStatus.SUCCEEDED, 1), point
        [attempt] = attempts(jobs[point].id)
        assert (attempt.outcome, attempt.worker_id) == (Outcome.SUCCEEDED, f"w-{point}")
