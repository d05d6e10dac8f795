"""runworker's command line: --burst ends when the queues are settled; bad options are refused."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus, Outcome

from .helpers import attempts, db_now, job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_burst_exits_0_once_nothing_due_is_left_in_its_queues(spawn_worker):
    due = [reliableq.enqueue("demo.noop", {"n": n}) for n in range(5)]
    future = reliableq.enqueue("demo.noop", {}, run_at=db_now() + dt.timedelta(hours=1))
    elsewhere = reliableq.enqueue("demo.noop", {}, queue="other")
    worker = spawn_worker("--burst")
    assert worker.wait(timeout=20) == 0, worker.output()
    assert "burst done" in worker.output()
    assert {job(j.id).status for j in due} == {JobStatus.SUCCEEDED}
    for untouched in (future, elsewhere):
        row = job(untouched.id)
        assert row.status == JobStatus.PENDING and row.attempts == 0
        assert not Attempt.objects.filter(job_id=untouched.id).exists()


def test_burst_on_an_empty_queue_exits_0_at_once(spawn_worker):
    worker = spawn_worker("--burst")
    assert worker.wait(timeout=20) == 0, worker.output()
    assert "burst done" in worker.output()


def test_a_queue_that_never_held_a_job_is_named_at_start_with_the_closest_that_did(spawn_worker):
    # Issue 50: `runworker --queues emials` (a typo) sat idle and said nothing.
    reliableq.enqueue("demo.noop", {}, queue="emails")
    worker = spawn_worker("--burst", "--queues", "emials,emails")
    assert worker.wait(timeout=20) == 0, worker.output()
    warned = [line for line in worker.output().splitlines() if "has never held a job" in line]
    assert len(warned) == 1, worker.output()
    assert "queue 'emials' has never held a job" in warned[0] and "closest queues that have: 'emails'." in warned[0]


def test_burst_waits_for_a_running_job_and_recovers_it_when_its_owner_is_gone(spawn_worker):
    """A RUNNING job counts as work: the burst worker stays until it is settled."""
    token = uuid.uuid4()
    orphan = Job.objects.create(
        kind="demo.noop",
        status=JobStatus.RUNNING,
        attempts=1,
        lease_token=token,
        worker_id="w-gone",
        lease_expires_at=db_now() + dt.timedelta(seconds=60),
    )
    Attempt.objects.create(job=orphan, number=1, worker_id="w-gone", lease_token=token, outcome=Outcome.RUNNING)
    worker = spawn_worker("--burst", "--lease-seconds", "1")
    worker.wait_for_output(" started: ", timeout=30)
    # Its owner stops renewing: the lease now ends one second from now.
    expires = db_now() + dt.timedelta(seconds=1)
    Job.objects.filter(pk=orphan.pk).update(lease_expires_at=expires)
    assert worker.wait(timeout=20) == 0, worker.output()
    done = job(orphan.id)
    assert done.status == JobStatus.SUCCEEDED and done.attempts == 2 and done.worker_id == "w1"
    first, second = attempts(orphan.id)
    assert (first.worker_id, first.outcome) == ("w-gone", Outcome.LEASE_EXPIRED)
    assert (second.worker_id, second.outcome) == ("w1", Outcome.SUCCEEDED)
    assert second.started_at >= expires


BAD_OPTIONS = [
    (["--concurrency", "0"], "--concurrency must be at least 1."),
    (["--concurrency=-3"], "--concurrency must be at least 1."),
    (["--queues", "bad queue!"], "Invalid queue name(s): bad queue!"),
    (["--queues", " , "], "--queues needs at least one queue name."),
    (["--lease-seconds", "0"], "--lease-seconds must be positive."),
    (["--grace-seconds=-1"], "--grace-seconds cannot be negative."),
    (["--health-file", "/nonexistent/worker.alive"], "--health-file: no directory /nonexistent to write it in."),
]


def test_runworker_refuses_bad_options_with_a_command_error(spawn_worker):
    waiting = reliableq.enqueue("demo.noop", {})
    # Started side by side: each one only parses its options and stops.
    workers = [(spawn_worker(*args, "--burst"), args, message) for args, message in BAD_OPTIONS]
    for worker, args, message in workers:
        # A dozen Django start-ups at once on two loaded cores: the deadline is generous, the exit code is the check.
        assert worker.wait(timeout=120) == 1, (args, worker.output())
        assert f"CommandError: {message}" in worker.output(), (args, worker.output())
        assert "Traceback" not in worker.output()
        assert " started: " not in worker.output()
    assert job(waiting.id).status == JobStatus.PENDING
