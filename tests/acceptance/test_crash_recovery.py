"""Workers that die (SIGKILL), pause (SIGSTOP) or get killed by their job: leases recover the work."""

from __future__ import annotations

import signal

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus, Outcome
from tests.support import wait_until

from .helpers import attempts, is_status, job, owner_of, start_idle


def snapshot(job_id):
    """Every column of the job and of its attempts."""
    return (
        Job.objects.filter(pk=job_id).values().get(),
        list(Attempt.objects.filter(job_id=job_id).order_by("number").values()),
    )


pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEASE = "1"


def test_a_job_whose_worker_is_sigkilled_mid_run_is_reclaimed_after_its_lease_and_succeeds_once(spawn_worker):
    workers = start_idle(spawn_worker, 2, "--lease-seconds", LEASE)
    sleeper = reliableq.enqueue("test.sleep", {"seconds": 1.5})
    a_id = wait_until(owner_of(sleeper.id), timeout=15, what="a worker to claim")
    (b_id,) = set(workers) - {a_id}
    a = workers[a_id]
    a.signal(signal.SIGKILL)
    assert a.wait(timeout=10) == -signal.SIGKILL
    orphaned = job(sleeper.id)
    assert orphaned.status == JobStatus.RUNNING and orphaned.worker_id == a_id

    wait_until(is_status(sleeper.id, JobStatus.SUCCEEDED), timeout=20, what=f"{b_id} to recover the job")
    done = job(sleeper.id)
    assert done.attempts == 2 and done.worker_id == b_id  # A = 2
    first, second = attempts(sleeper.id)
    assert (first.number, first.worker_id, first.outcome) == (1, a_id, Outcome.LEASE_EXPIRED)
    assert (second.number, second.worker_id, second.outcome) == (2, b_id, Outcome.SUCCEEDED)
    assert [a.outcome for a in attempts(sleeper.id)].count(Outcome.SUCCEEDED) == 1  # F = 1
    # The other worker was polling all along, yet it waited for the dead owner's lease to end.
    assert second.started_at >= orphaned.lease_expires_at
    assert first.lease_token == orphaned.lease_token != second.lease_token


def test_a_paused_worker_resumed_after_losing_its_lease_changes_nothing(spawn_worker):
    workers = start_idle(spawn_worker, 2, "--lease-seconds", LEASE)
    sleeper = reliableq.enqueue("test.sleep", {"seconds": 1.5})
    a_id = wait_until(owner_of(sleeper.id), timeout=15, what="a worker to claim")
    (b_id,) = set(workers) - {a_id}
    a = workers[a_id]
    a.signal(signal.SIGSTOP)
    stale_token = job(sleeper.id).lease_token

    wait_until(is_status(sleeper.id, JobStatus.SUCCEEDED), timeout=20, what=f"{b_id} to take over and finish the job")
    before = snapshot(sleeper.id)
    first, second = attempts(sleeper.id)
    assert (first.worker_id, first.outcome, first.lease_token) == (a_id, Outcome.LEASE_EXPIRED, stale_token)
    assert (second.worker_id, second.outcome) == (b_id, Outcome.SUCCEEDED)
    assert second.lease_token != stale_token

    a.signal(signal.SIGCONT)
    # A's handler returns and A tries to finalize under its stale token: the fence refuses it.
    a.wait_for_output("lease lost; result discarded", timeout=15)

    assert snapshot(sleeper.id) == before, "a stale owner changed the job or its attempts"
    done = job(sleeper.id)
    assert done.status == JobStatus.SUCCEEDED and done.worker_id == b_id and done.attempts == 2
    assert [a.outcome for a in attempts(sleeper.id)].count(Outcome.SUCCEEDED) == 1
    # The resumed worker is healthy: it shuts down cleanly.
    a.signal(signal.SIGTERM)
    assert a.wait(timeout=10) == 0, a.output()


def test_a_poison_job_that_kills_every_worker_ends_dead_within_its_budget(spawn_worker):
    poison = reliableq.enqueue("test.poison", {})
    assert poison.max_attempts == 3
    codes = []
    while not is_status(poison.id, JobStatus.DEAD)():
        # A supervisor restarting workers as they die; the last one finds the job dead and goes idle.
        assert len(codes) < 6, f"still not DEAD after {len(codes)} workers: {job(poison.id).status}"
        worker = spawn_worker("--burst", "--lease-seconds", "0.5")
        codes.append(worker.wait(timeout=20))

    assert codes == [-signal.SIGKILL] * 3 + [0], codes
    dead = job(poison.id)
    assert dead.attempts == 3, "attempts are counted at claim, so crashes spend the budget"
    assert dead.lease_token is None and dead.finished_at is not None
    assert "expired" in dead.last_error and "no attempts left" in dead.last_error, dead.last_error
    rows = attempts(poison.id)
    assert [(a.number, a.outcome) for a in rows] == [(n, Outcome.LEASE_EXPIRED) for n in (1, 2, 3)]
    assert [a.worker_id for a in rows] == ["w1", "w2", "w3"]
