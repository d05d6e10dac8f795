"""SIGTERM / SIGINT on real worker processes: drain within the grace period, never fake success."""

from __future__ import annotations

import datetime as dt
import signal
import time

import pytest

import reliableq
from reliableq.models import Attempt, JobStatus, Outcome
from tests.support import wait_until

from .helpers import attempts, db_now, is_status, job, owner_of, start_idle

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_sigterm_stops_claiming_finalizes_the_running_job_and_exits_0_within_grace(spawn_worker):
    running = reliableq.enqueue("test.sleep", {"seconds": 2})
    worker = spawn_worker("--concurrency", "2", "--grace-seconds", "10")
    wait_until(is_status(running.id, JobStatus.RUNNING, worker_id="w1"), timeout=15, what="w1 to claim the sleep job")

    # Due shortly after the signal, while the worker still has a free slot and keeps polling
    # (every 0.1 s) to drain the sleep job: a worker that still claimed would take it.
    later = reliableq.enqueue("demo.noop", {}, run_at=db_now() + dt.timedelta(seconds=0.3))
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(timeout=15)
    elapsed = time.monotonic() - sent
    exited_at = db_now()

    assert code == 0, worker.output()
    assert elapsed < 10, f"exited {elapsed:.1f}s after SIGTERM, past the 10 s grace period"
    assert "drained, exiting" in worker.output()

    done = job(running.id)
    assert done.status == JobStatus.SUCCEEDED
    assert done.attempts == 1 and done.lease_token is None and done.finished_at is not None
    [attempt] = attempts(running.id)
    assert attempt.outcome == Outcome.SUCCEEDED and attempt.worker_id == "w1"

    # It was due for a while before the worker exited, and nobody claimed it.
    untouched = job(later.id)
    assert exited_at - untouched.run_at > dt.timedelta(seconds=0.3), "precondition: the job was due in time"
    assert untouched.status == JobStatus.PENDING and untouched.attempts == 0 and untouched.worker_id == ""
    assert not Attempt.objects.filter(job_id=later.id).exists()


def test_sigterm_with_a_handler_outliving_grace_exits_without_success_and_the_lease_is_reclaimed(spawn_worker):
    grace, lease = 1.0, 0.6
    workers = start_idle(spawn_worker, 2, "--grace-seconds", str(grace), "--lease-seconds", str(lease))
    sleeper = reliableq.enqueue("test.sleep", {"seconds": 2.5})
    a_id = wait_until(owner_of(sleeper.id), timeout=15, what="a worker to claim the sleep job")
    (b_id,) = set(workers) - {a_id}
    a, b = workers[a_id], workers[b_id]
    claimed = job(sleeper.id)

    signalled_at = db_now()
    sent = time.monotonic()
    a.signal(signal.SIGTERM)
    code = a.wait(timeout=10)
    elapsed = time.monotonic() - sent
    assert code == 0, a.output()
    assert "grace period over" in a.output()
    # It used its grace period, and left before the 2.5 s handler could have returned (had it
    # waited for the handler, the job below would be SUCCEEDED and the log would say drained).
    assert grace * 0.9 <= elapsed < 2.5, elapsed

    left = job(sleeper.id)
    if left.status == JobStatus.RUNNING and left.worker_id == a_id:
        # The heartbeat kept renewing through the grace period: the lease outlives the signal
        # by more than one lease length (without renewal it would end by signalled_at + lease).
        assert left.lease_expires_at > signalled_at + dt.timedelta(seconds=grace)
        assert left.lease_token == claimed.lease_token and left.attempts == 1 and left.finished_at is None
        [open_attempt] = attempts(sleeper.id)
        assert open_attempt.outcome == Outcome.RUNNING and open_attempt.finished_at is None
    else:
        # The other worker may already have taken the expired lease back; never is it a success.
        assert left.status == JobStatus.RUNNING and left.worker_id == b_id, (left.status, left.worker_id)

    wait_until(is_status(sleeper.id, JobStatus.SUCCEEDED), timeout=20, what="the other worker to finish the job")
    first, second = attempts(sleeper.id)
    assert first.worker_id == a_id and first.outcome == Outcome.LEASE_EXPIRED
    assert second.worker_id == b_id and second.outcome == Outcome.SUCCEEDED
    # B was idle and polling all along, yet it waited for A's renewed lease to run out.
    assert second.started_at >= signalled_at + dt.timedelta(seconds=grace)
    assert second.lease_token != first.lease_token
    done = job(sleeper.id)
    assert done.attempts == 2 and done.worker_id == b_id
    assert b.proc.poll() is None


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)],
    ids=["TERM-then-INT", "INT-then-TERM"],
)
def test_a_second_signal_during_grace_exits_at_once_with_a_nonzero_code(spawn_worker, first, second):
    sleeper = reliableq.enqueue("test.sleep", {"seconds": 10})
    worker = spawn_worker("--grace-seconds", "30")
    wait_until(is_status(sleeper.id, JobStatus.RUNNING, worker_id="w1"), timeout=15, what="w1 to claim")

    sent = time.monotonic()
    worker.signal(first)
    # Two different signals are never merged into one delivery: the second always counts.
    worker.signal(second)
    code = worker.wait(timeout=10)
    elapsed = time.monotonic() - sent

    assert code != 0 and code > 0, f"exit code {code}: expected a deliberate non-zero exit\n{worker.output()}"
    assert elapsed < 4.0, f"took {elapsed:.1f}s; the handler (10 s) and the grace (30 s) were not cut short"
    assert "second signal" in worker.output()
    left = job(sleeper.id)
    assert left.status == JobStatus.RUNNING and left.finished_at is None
    [attempt] = attempts(sleeper.id)
    assert attempt.outcome == Outcome.RUNNING


def test_a_repeated_sigterm_during_grace_exits_at_once_with_a_nonzero_code(spawn_worker):
    sleeper = reliableq.enqueue("test.sleep", {"seconds": 10})
    worker = spawn_worker("--grace-seconds", "30")
    wait_until(is_status(sleeper.id, JobStatus.RUNNING, worker_id="w1"), timeout=15, what="w1 to claim")

    sent = time.monotonic()
    worker.signal(signal.SIGTERM)

    def another_sigterm_ends_it() -> bool:
        # Two SIGTERMs that land before Python runs its handler merge into one call, so keep
        # sending: a worker that ignored every SIGTERM after the first would still drain for 10 s.
        if worker.proc.poll() is not None:
            return True
        worker.signal(signal.SIGTERM)
        return False

    wait_until(another_sigterm_ends_it, timeout=10, interval=0.1, what="the worker to exit on a second SIGTERM")
    elapsed = time.monotonic() - sent
    assert worker.proc.returncode > 0, worker.output()
    assert elapsed < 4.0, elapsed  # far below the 10 s handler: the grace was cut short
    assert "second signal" in worker.output()
    assert job(sleeper.id).status == JobStatus.RUNNING
