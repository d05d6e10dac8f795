"""--concurrency bounds handlers in flight, read back from the attempts' own timestamps.

An attempt's [started_at, finished_at] lies inside the time its slot was held: started_at is the
claim's database time, and the slot is freed only after the finalize commits. A TIMED_OUT
attempt is the exception: its end is written at the timeout while the stuck thread keeps the
slot until the handler returns, so its slot time is extended to started_at + the handler's sleep
(a lower bound of when it returned).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

import reliableq
from bench.proccpu import cpu_seconds
from reliableq import db
from reliableq.models import Attempt, JobStatus, Outcome
from tests.support import wait_until

from .helpers import is_status, max_in_flight

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def slot_intervals(worker_id: str, stuck_seconds: float = 0.0) -> list[tuple[dt.datetime, dt.datetime]]:
    intervals = []
    for a in Attempt.objects.filter(worker_id=worker_id):
        end = a.finished_at
        if a.outcome == Outcome.TIMED_OUT:
            end = max(end, a.started_at + dt.timedelta(seconds=stuck_seconds))
        intervals.append((a.started_at, end))
    return intervals


def test_one_worker_never_runs_more_handlers_than_its_concurrency(spawn_worker):
    with db.atomic():
        jobs = [reliableq.enqueue("test.sleep", {"seconds": 0.1 + (i % 5) * 0.025}) for i in range(30)]
    worker = spawn_worker("--concurrency", "3", "--burst")
    assert worker.wait(timeout=30) == 0, worker.output()

    rows = Attempt.objects.filter(job_id__in=[j.id for j in jobs])
    assert rows.count() == 30
    assert set(rows.values_list("outcome", "worker_id")) == {(Outcome.SUCCEEDED, "w1")}
    peak = max_in_flight(slot_intervals("w1"))
    assert peak <= 3, f"{peak} handlers in flight at once with --concurrency 3"
    assert peak >= 2, f"peak {peak}: the worker ran its jobs one at a time"


def test_timed_out_handlers_keep_their_slots_until_they_return(spawn_worker):
    """Two stuck handlers fill both slots: nothing else starts until they really return."""
    stuck_seconds = 2.0
    with db.atomic():
        stuck = [reliableq.enqueue("test.stuck", {"seconds": stuck_seconds}, max_attempts=1) for _ in range(2)]
        quick = [reliableq.enqueue("demo.noop", {}, priority=1) for _ in range(4)]
    worker = spawn_worker("--concurrency", "2", "--burst")
    assert worker.wait(timeout=30) == 0, worker.output()

    stuck_attempts = list(Attempt.objects.filter(job_id__in=[j.id for j in stuck]))
    assert [a.outcome for a in stuck_attempts] == [Outcome.TIMED_OUT] * 2
    for a in stuck_attempts:
        # Recorded at the 1 s timeout, well before the handler returned.
        assert dt.timedelta(seconds=1) <= a.finished_at - a.started_at < dt.timedelta(seconds=stuck_seconds)
    assert worker.output().count("handler returned after its timeout") == 2
    for j in stuck:
        assert is_status(j.id, JobStatus.DEAD)()

    held_until = min(a.started_at for a in stuck_attempts) + dt.timedelta(seconds=stuck_seconds)
    others = list(Attempt.objects.filter(job_id__in=[j.id for j in quick]))
    assert len(others) == 4 and {a.outcome for a in others} == {Outcome.SUCCEEDED}
    early = [a.started_at for a in others if a.started_at < held_until]
    assert not early, f"claimed {len(early)} job(s) while both slots still ran stuck handlers"
    assert max_in_flight(slot_intervals("w1", stuck_seconds)) <= 2


def test_a_stuck_handler_holds_one_slot_while_the_other_keeps_working(spawn_worker):
    stuck_seconds = 2.0
    with db.atomic():
        stuck = reliableq.enqueue("test.stuck", {"seconds": stuck_seconds}, max_attempts=1)
        quick = [reliableq.enqueue("test.sleep", {"seconds": 0.1}, priority=1) for _ in range(14)]
    worker = spawn_worker("--concurrency", "2", "--burst")
    assert worker.wait(timeout=30) == 0, worker.output()

    [timed_out] = Attempt.objects.filter(job_id=stuck.id)
    assert timed_out.outcome == Outcome.TIMED_OUT
    assert "handler returned after its timeout" in worker.output()
    held_until = timed_out.started_at + dt.timedelta(seconds=stuck_seconds)

    others = list(Attempt.objects.filter(job_id__in=[j.id for j in quick]))
    assert {a.outcome for a in others} == {Outcome.SUCCEEDED} and len(others) == 14
    # Between the timeout and the stuck handler's return the database shows one attempt
    # fewer than the slots in use; a worker that freed the slot at the timeout would run two
    # sleep jobs side by side there.
    while_stuck = [(a.started_at, a.finished_at) for a in others if a.started_at < held_until]
    assert len(while_stuck) >= 3, "the free slot was not used while the stuck handler ran"
    assert max_in_flight(while_stuck) == 1, "two jobs ran beside the stuck handler on a 2-slot worker"
    assert max_in_flight(slot_intervals("w1", stuck_seconds)) <= 2


def test_a_worker_with_every_slot_busy_waits_instead_of_spinning(spawn_worker):
    sleeper = reliableq.enqueue("test.sleep", {"seconds": 2})
    worker = spawn_worker("--concurrency", "1")
    wait_until(is_status(sleeper.id, JobStatus.RUNNING, worker_id="w1"), timeout=15, what="w1 to claim")
    cpu_before, wall_before = cpu_seconds(worker.pid), time.monotonic()
    wait_until(is_status(sleeper.id, JobStatus.SUCCEEDED), timeout=15, what="the sleep job to finish")
    cpu_used, wall = cpu_seconds(worker.pid) - cpu_before, time.monotonic() - wall_before
    assert wall > 1.5
    # A full worker has nothing to do but renew its lease and wait for the handler.
    assert cpu_used < 0.1 * wall, f"the worker burnt {cpu_used:.2f}s of CPU in {wall:.2f}s while full"
