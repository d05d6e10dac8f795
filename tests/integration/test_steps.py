"""Durable steps, checkpoints, sleep and events in one process (reliableq.testing runs the handlers):
what is recorded, what a later attempt reads back, what a stale attempt cannot write, how a wait
parks its job and an emit wakes it. Real workers and SIGKILL: tests/acceptance/test_steps.py."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

import reliableq
from reliableq import queue as jobqueue
from reliableq import registry, services
from reliableq.conf import queue_alias
from reliableq.errors import InvalidJob
from reliableq.models import Attempt, Event, Job, JobStatus, Outcome, Step, StepKind
from reliableq.queue import events, steps
from reliableq.testing import run_due
from reliableq.worker import executor

from .helpers import claim_jobs, expire, in_thread, make_due

pytestmark = pytest.mark.django_db


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "steps.log"


def runs(log: Path, job_id: uuid.UUID) -> Counter[str]:
    """How often each step's function ran for the job, in any attempt."""
    lines = log.read_text().split("\n") if log.exists() else []
    return Counter(line.split()[1] for line in lines if line.startswith(str(job_id)))


def job(job_id: uuid.UUID) -> Job:
    return Job.objects.get(pk=job_id)


def test_a_retried_job_runs_each_recorded_step_once_and_returns_its_value(log: Path) -> None:
    job_id = reliableq.enqueue("steps.three", {"log": str(log), "fail_at": "two"}).id
    [first] = run_due()
    assert first.status == JobStatus.PENDING and "step two failed" in first.error
    assert list(Step.objects.filter(job_id=job_id).values_list("name", "kind", "value", "attempt")) == [
        ("one", StepKind.STEP, "one", 1)
    ]
    make_due(job_id)
    [second] = run_due()
    assert second.status == JobStatus.SUCCEEDED and second.return_value == ["one", "two", "three"]
    assert runs(log, job_id) == {"one": 1, "two": 1, "three": 1}, "one was read back, not run again"


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = dict(registry._handlers)
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


@pytest.mark.usefixtures("handlers")
def test_a_repeated_name_an_unstorable_value_and_a_name_of_another_kind_are_refused() -> None:
    @reliableq.handler("t.repeat", max_attempts=1)
    def repeat(job: jobqueue.ClaimedJob) -> None:
        job.step("same", lambda: 1)
        job.step("same", lambda: 2)

    @reliableq.handler("t.unstorable", max_attempts=3)
    def unstorable(job: jobqueue.ClaimedJob) -> None:
        job.step("fetch", lambda: {"when": object()})

    @reliableq.handler("t.clash", max_attempts=1)
    def clash(job: jobqueue.ClaimedJob) -> None:
        job.checkpoint("cursor", 1)
        job.step("cursor", lambda: 1)

    for kind in ("t.repeat", "t.unstorable", "t.clash"):
        reliableq.enqueue(kind, {})
    ran = {r.kind: r for r in run_due()}
    assert "InvalidJob: a step named 'same' ran already in this attempt" in ran["t.repeat"].error
    assert ran["t.unstorable"].status == JobStatus.DEAD, "never storable: no retry"
    assert "step 'fetch': its value cannot be stored" in ran["t.unstorable"].error
    assert "'cursor' is the name of this job's checkpoint" in ran["t.clash"].error
    assert not Step.objects.filter(name="fetch").exists()


def test_a_stale_attempt_records_no_step_and_learns_it_lost_its_lease(log: Path) -> None:
    job_id = reliableq.enqueue("steps.three", {"log": str(log)}).id
    [stale] = claim_jobs()
    expire(job_id)
    jobqueue.rescue()
    [current] = claim_jobs(worker_id="w-other")
    assert current.lease_token != stale.lease_token
    with pytest.raises(steps.LeaseLost):
        stale.step("one", lambda: "stale")
    assert current.step("one", lambda: "current") == "current"
    assert list(Step.objects.filter(job_id=job_id).values_list("value", "attempt")) == [("current", 2)]


def test_a_first_attempt_reads_no_records_and_a_later_one_reads_them_once(log: Path) -> None:
    """Nothing can be recorded before a job's first claim, so its first attempt's step is one statement."""
    job_id = reliableq.enqueue("steps.three", {"log": str(log)}).id
    [first] = claim_jobs()
    with CaptureQueriesContext(connections[queue_alias()]) as sent:
        first.step("one", lambda: 1)
        first.step("two", lambda: 2)
    assert first.attempt == 1 and len(sent) == 2, [q["sql"][:60] for q in sent.captured_queries]
    expire(job_id)
    jobqueue.rescue()
    make_due(job_id)
    [second] = claim_jobs()
    with CaptureQueriesContext(connections[queue_alias()]) as sent:
        assert second.step("one", lambda: "again") == 1
        assert second.step("two", lambda: "again") == 2
        second.step("three", lambda: 3)
    assert second.attempt == 2 and len(sent) == 2, "one read of the records, then the new step's record"


@pytest.mark.django_db(transaction=True)
def test_a_step_whose_connection_was_dropped_while_it_ran_is_recorded_on_a_new_one(log: Path) -> None:
    job_id = reliableq.enqueue("steps.three", {"log": str(log)}).id
    [taken] = claim_jobs()
    conn = connections[queue_alias()]
    conn.ensure_connection()
    mine = conn.connection.info.backend_pid

    def dropped_while_it_ran() -> str:
        in_thread(lambda: connections[queue_alias()].cursor().execute("SELECT pg_terminate_backend(%s)", [mine]))
        return "done"

    assert taken.step("one", dropped_while_it_ran) == "done"
    assert conn.connection.info.backend_pid != mine, "recorded on a new connection"
    assert list(Step.objects.filter(job_id=job_id).values_list("name", "value")) == [("one", "done")]


def test_a_loop_resumes_at_its_last_checkpoint(log: Path) -> None:
    job_id = reliableq.enqueue("steps.loop", {"log": str(log), "items": 5}).id
    [taken] = claim_jobs()
    taken.checkpoint("next", 3)  # items 0 to 2 done, as an attempt killed after its third checkpoint left it
    assert taken.checkpointed("next") == 3
    expire(job_id)
    jobqueue.rescue()
    make_due(job_id)
    [resumed] = run_due()
    assert resumed.return_value == 3
    assert runs(log, job_id) == {"item-3": 1, "item-4": 1}
    assert Step.objects.get(job_id=job_id, name="next").value == 5


def test_a_sleep_ends_the_attempt_without_spending_it_and_the_job_resumes_after_it(log: Path) -> None:
    job_id = reliableq.enqueue("steps.sleeper", {"log": str(log), "sleep": 600}).id
    [slept] = run_due()
    assert (slept.status, slept.outcome) == (JobStatus.PENDING, Outcome.SNOOZED)
    asleep = job(job_id)
    assert asleep.max_attempts == 4, "the attempt was given back"
    assert not run_due(), "not due: it sleeps 10 minutes"
    until = Step.objects.get(job_id=job_id, name="nap")
    assert until.kind == StepKind.SLEEP and until.value["until"] > 0
    Step.objects.filter(pk=until.pk).update(value={"until": 0})  # ten minutes later, as far as it knows
    make_due(job_id)
    [woke] = run_due()
    assert woke.status == JobStatus.SUCCEEDED and woke.return_value == "after"
    assert runs(log, job_id) == {"before": 1, "after": 1}


def test_a_wait_parks_the_job_and_a_committed_emit_wakes_it_once(log: Path) -> None:
    job_id = reliableq.enqueue("steps.waiter", {"log": str(log), "event": "order-42-paid"}).id
    [parked] = run_due()
    assert (parked.status, parked.outcome) == (JobStatus.WAITING, Outcome.SNOOZED)
    waiting = job(job_id)
    assert waiting.waiting_for == "order-42-paid" and waiting.max_attempts == 4
    assert not run_due(), "a waiting job is never claimed"

    with pytest.raises(RuntimeError), transaction.atomic(using=queue_alias()):  # the emitter's, on the queue's
        reliableq.emit("order-42-paid", {"amount": 1})
        raise RuntimeError("the emitter's transaction rolls back")
    assert job(job_id).status == JobStatus.WAITING and not Event.objects.exists()

    first = reliableq.emit("order-42-paid", {"amount": 42})
    assert first.woken == 1 and job(job_id).status == JobStatus.PENDING and job(job_id).waiting_for is None
    again = reliableq.emit("order-42-paid", {"amount": 43})
    assert again.woken == 0 and again.pk == first.pk and again.payload == {"amount": 42}
    [woke] = run_due()
    assert woke.status == JobStatus.SUCCEEDED and woke.return_value == {"amount": 42}
    assert runs(log, job_id) == {"before": 1, "after": 1}


def test_a_wait_for_an_event_emitted_before_it_returns_at_once(log: Path) -> None:
    reliableq.emit("invoice-7-sent", {"n": 7})
    job_id = reliableq.enqueue("steps.waiter", {"log": str(log), "event": "invoice-7-sent"}).id
    [ran] = run_due()
    assert ran.status == JobStatus.SUCCEEDED and ran.return_value == {"n": 7}
    assert Step.objects.get(job_id=job_id, name="invoice-7-sent").value == {"payload": {"n": 7}}


def test_a_wait_that_times_out_runs_again_and_raises_wait_timeout(log: Path) -> None:
    job_id = reliableq.enqueue("steps.waiter", {"log": str(log), "event": "never", "timeout": 3600}).id
    run_due()
    assert job(job_id).status == JobStatus.WAITING
    assert events.wake_timeouts() == 0, "an hour to go"
    Job.objects.filter(pk=job_id).update(run_at=job(job_id).created_at)  # its hour has passed
    Step.objects.filter(job_id=job_id, name="never").update(value={"until": 0})
    assert events.wake_timeouts() == 1
    [ran] = run_due()
    assert ran.return_value == "timed out"


@pytest.mark.django_db(transaction=True)
def test_a_park_that_meets_an_emit_in_flight_runs_again_soon_and_finds_the_event(log: Path) -> None:
    job_id = reliableq.enqueue("steps.waiter", {"log": str(log), "event": "racing"}).id
    [taken] = claim_jobs()
    result = executor.run_attempt(taken)
    assert result.finish.status == JobStatus.WAITING

    def park_while_an_emit_holds_the_lock() -> None:
        jobqueue.finish([result.finish])

    with transaction.atomic():
        reliableq.emit("racing", {"ok": True})  # holds the event's lock until this block commits
        in_thread(park_while_an_emit_holds_the_lock)
    parked = job(job_id)
    assert parked.status == JobStatus.PENDING and parked.waiting_for is None, "not WAITING for an event emitted"
    make_due(job_id)
    [ran] = run_due()
    assert ran.return_value == {"ok": True}


def test_replay_resumes_after_the_recorded_steps_and_from_the_start_forgets_them(log: Path) -> None:
    job_id = reliableq.enqueue("steps.three", {"log": str(log), "fail_at": "three"}, max_attempts=1).id
    [dead] = run_due()
    assert dead.status == JobStatus.DEAD
    reliableq.replay(job_id)
    assert run_due()[0].status == JobStatus.SUCCEEDED
    assert runs(log, job_id) == {"one": 1, "two": 1, "three": 1}
    Job.objects.filter(pk=job_id).update(status=JobStatus.DEAD)
    services.replay(job_id, restart=True)
    assert not Step.objects.filter(job_id=job_id).exists()
    run_due()
    assert runs(log, job_id) == {"one": 2, "two": 2, "three": 2}
    assert Attempt.objects.filter(job_id=job_id).count() == 3


def test_an_event_name_or_payload_that_cannot_be_stored_is_refused() -> None:
    for name in ("", "x" * 256, 7, "nul\x00"):
        with pytest.raises(InvalidJob):
            reliableq.emit(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob):
        reliableq.emit("ok", {"when": object()})  # type: ignore[dict-item]
    assert not Event.objects.exists()
