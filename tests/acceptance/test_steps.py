"""Durable steps, sleep and events under real worker processes: a worker SIGKILLed between two steps
and one inside a checkpointed loop, a sleep that frees the only slot, waits woken by an emit, in
threads, on the event loop and in a child process."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import pytest
from django.db import transaction

import reliableq
from reliableq.models import Attempt, JobStatus, Outcome, Step
from tests.support import wait_until

from .helpers import is_status, job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def runs(log: Path, job_id: uuid.UUID) -> Counter[str]:
    lines = log.read_text().split("\n") if log.exists() else []
    return Counter(line.split()[1] for line in lines if line.startswith(str(job_id)))


def test_a_worker_killed_between_two_steps_leaves_them_to_run_once_each(spawn_worker, tmp_path: Path) -> None:
    log = tmp_path / "steps.log"
    first = spawn_worker("--lease-seconds", "1", "--worker-id", "first")
    job_id = reliableq.enqueue("steps.three", {"log": str(log), "seconds": 1}).id
    # Killed once step two is recorded, while step three's function runs (each takes a second).
    wait_until(lambda: Step.objects.filter(job_id=job_id, name="two").exists(), timeout=60, what="step two's record")
    first.signal(signal.SIGKILL)
    assert first.wait(timeout=10) == -signal.SIGKILL
    # A long lease: on a loaded machine a short one can lapse under the second worker too.
    spawn_worker("--lease-seconds", "30", "--worker-id", "second")
    wait_until(is_status(job_id, JobStatus.SUCCEEDED), timeout=60, what="the second worker to finish it")
    counts = runs(log, job_id)
    assert counts["one"] == 1 and counts["two"] == 1, counts
    # Step three had not recorded its value when its worker died: it runs again (at least once).
    assert counts["three"] in (1, 2), counts
    assert job(job_id).attempts == 2 and job(job_id).result == ["one", "two", "three"]


def test_a_worker_killed_inside_a_loop_resumes_it_at_its_last_checkpoint(spawn_worker, tmp_path: Path) -> None:
    log = tmp_path / "steps.log"
    first = spawn_worker("--lease-seconds", "1", "--worker-id", "first")
    job_id = reliableq.enqueue("steps.loop", {"log": str(log), "items": 6, "seconds": 0.5}).id

    def checkpointed() -> int:
        return int(Step.objects.filter(job_id=job_id, name="next").values_list("value", flat=True).first() or 0)

    wait_until(lambda: checkpointed() >= 2, timeout=60, what="two items checkpointed")
    first.signal(signal.SIGKILL)
    assert first.wait(timeout=10) == -signal.SIGKILL
    at_death = checkpointed()  # nothing moves it once its worker is dead
    spawn_worker("--lease-seconds", "30", "--worker-id", "second")
    wait_until(is_status(job_id, JobStatus.SUCCEEDED), timeout=60, what="the second worker to finish it")
    assert job(job_id).result == at_death, "the second attempt began at the last checkpoint"
    counts = runs(log, job_id)
    assert all(counts[f"item-{n}"] == 1 for n in range(at_death)), counts  # before it: never again
    # The item its worker died in runs again (once, had it died between a checkpoint and the next item).
    assert counts[f"item-{at_death}"] in (1, 2), counts
    assert all(counts[f"item-{n}"] == 1 for n in range(at_death + 1, 6)), counts
    assert Step.objects.get(job_id=job_id, name="next").value == 6


@pytest.mark.parametrize("kind", ["steps.three_async", "steps.three_isolated"])
def test_steps_record_and_resume_on_the_event_loop_and_in_a_child(spawn_worker, tmp_path: Path, kind: str) -> None:
    log = tmp_path / "steps.log"
    spawn_worker("--lease-seconds", "2")
    job_id = reliableq.enqueue(kind, {"log": str(log)}).id
    wait_until(is_status(job_id, JobStatus.SUCCEEDED), timeout=60, what=f"{kind} to finish")
    assert runs(log, job_id) == {"one": 1, "two": 1, "three": 1}
    assert job(job_id).result == ["one", "two", "three"]


@pytest.mark.parametrize("kind", ["steps.sleeper", "steps.sleeper_async"])
def test_a_sleep_frees_the_only_slot_for_another_job(spawn_worker, tmp_path: Path, kind: str) -> None:
    log = tmp_path / "steps.log"
    spawn_worker("--concurrency", "1")
    sleeper = reliableq.enqueue(kind, {"log": str(log), "sleep": 3}).id
    wait_until(lambda: job(sleeper).status == JobStatus.PENDING and job(sleeper).attempts == 1, timeout=30,
               what="the first attempt to end in a sleep")  # fmt: skip
    other = reliableq.enqueue("demo.noop", {}).id
    wait_until(is_status(other, JobStatus.SUCCEEDED), timeout=30, what="another job to run during the sleep")
    assert job(sleeper).status == JobStatus.PENDING, "still asleep when the other job finished"
    wait_until(is_status(sleeper, JobStatus.SUCCEEDED), timeout=30, what="the sleeper to wake and finish")
    done = job(sleeper)
    assert done.attempts == 2 and done.max_attempts == 4, "two attempts, one given back by the sleep"
    assert [a.outcome for a in Attempt.objects.filter(job_id=sleeper).order_by("number")] == [
        Outcome.SNOOZED, Outcome.SUCCEEDED,
    ]  # fmt: skip
    if kind == "steps.sleeper":
        assert runs(log, sleeper) == {"before": 1, "after": 1}


@pytest.mark.parametrize("kind", ["steps.waiter", "steps.waiter_async", "steps.waiter_isolated"])
def test_a_wait_is_woken_by_a_committed_emit_and_not_by_one_rolled_back(spawn_worker, tmp_path: Path, kind: str):
    log = tmp_path / "steps.log"
    spawn_worker("--concurrency", "2")
    event = f"order-{uuid.uuid4()}-paid"
    waiting = reliableq.enqueue(kind, {"log": str(log), "event": event}).id
    wait_until(is_status(waiting, JobStatus.WAITING), timeout=30, what="the job to wait")
    with pytest.raises(RuntimeError), transaction.atomic():
        reliableq.emit(event, {"amount": 1})
        raise RuntimeError("rolled back")
    assert job(waiting).status == JobStatus.WAITING and job(waiting).waiting_for == event
    with transaction.atomic():
        reliableq.emit(event, {"amount": 42})
    wait_until(is_status(waiting, JobStatus.SUCCEEDED), timeout=30, what="the emit to wake it")
    assert job(waiting).result == {"amount": 42}


def test_an_async_handlers_steps_outlive_their_connections_being_terminated(spawn_worker, tmp_path: Path) -> None:
    """An async handler's database calls run on asyncio's thread pool, whose threads outlive the attempt:
    a connection a restart broke there is closed after its error, or every later attempt fails on it."""
    from django.db import connection

    log = tmp_path / "steps.log"
    spawn_worker("--concurrency", "1", "--lease-seconds", "5")
    first = reliableq.enqueue("steps.three_async", {"log": str(log)}).id
    wait_until(is_status(first, JobStatus.SUCCEEDED), timeout=60, what="the first job")
    with connection.cursor() as cursor:  # what a database restart does to the worker's connections
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
    second = reliableq.enqueue("steps.three_async", {"log": str(log)}).id
    wait_until(lambda: job(second).status in (JobStatus.SUCCEEDED, JobStatus.DEAD), timeout=90, what="the second")
    assert job(second).status == JobStatus.SUCCEEDED, [
        (a.outcome, a.error[:80]) for a in Attempt.objects.filter(job_id=second)
    ]
    # Step one's record is the first call to meet a broken connection (a first attempt reads no
    # records): it is sent again on a new one, so step one ran once too.
    assert runs(log, second) == {"one": 1, "two": 1, "three": 1}
