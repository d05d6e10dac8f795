"""--concurrency bounds handlers in flight, read back from the attempts' own timestamps.

An attempt's [started_at, finished_at] lies inside the time its slot was held: started_at is the
claim's database time, and the slot is freed only after the finalize commits. A TIMED_OUT
attempt's end is written at its timeout, and its slot is freed then too: the stuck thread runs on
without one.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

import reliableq
from bench.proccpu import cpu_seconds
from reliableq.models import Attempt, JobStatus, Outcome
from reliableq.queue import db
from tests.support import wait_until

from .helpers import is_status, max_in_flight

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def slot_intervals(worker_id: str) -> list[tuple[dt.datetime, dt.datetime]]:
    return [(a.started_at, a.finished_at) for a in Attempt.objects.filter(worker_id=worker_id)]


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


def test_a_stuck_handlers_slot_is_taken_by_a_new_thread_at_its_timeout(spawn_worker):
    """One handler stuck past its 1 s timeout: its attempt ends TIMED_OUT and, while the thread runs on,
    both slots work again (a thread cannot be stopped; it no longer holds its slot)."""
    stuck_seconds = 3.0
    with db.atomic():
        stuck = reliableq.enqueue("test.stuck", {"seconds": stuck_seconds}, max_attempts=1)
        quick = [reliableq.enqueue("test.sleep", {"seconds": 0.1}, priority=1) for _ in range(20)]
    worker = spawn_worker("--concurrency", "2", "--burst")
    assert worker.wait(timeout=30) == 0, worker.output()

    [timed_out] = Attempt.objects.filter(job_id=stuck.id)
    assert timed_out.outcome == Outcome.TIMED_OUT
    assert dt.timedelta(seconds=1) <= timed_out.finished_at - timed_out.started_at < dt.timedelta(seconds=2)
    assert is_status(stuck.id, JobStatus.DEAD)()
    held_until = timed_out.started_at + dt.timedelta(seconds=stuck_seconds)
    others = list(Attempt.objects.filter(job_id__in=[j.id for j in quick]))
    assert {a.outcome for a in others} == {Outcome.SUCCEEDED} and len(others) == 20
    # After the timeout and before the stuck thread returned, two quick jobs ran side by side.
    freed = [(a.started_at, a.finished_at) for a in others if timed_out.finished_at <= a.started_at < held_until]
    assert max_in_flight(freed) == 2, "the stuck handler's slot was not given to a new thread"
    assert max_in_flight(slot_intervals("w1")) <= 2
    if worker.output().count("handler returned after its timeout") == 0:
        # --burst may exit before the stuck thread returns: then no late result was ever seen.
        assert "burst done" in worker.output()


def test_once_concurrency_threads_are_stuck_the_worker_exits_for_a_fresh_one(spawn_worker, tmp_path):
    """The issue's case: --concurrency 2, two handlers that block forever with timeout=1, five
    ordinary jobs behind them. The worker stops claiming, names the stuck jobs, removes its health
    file, and exits non-zero; the fresh workers a supervisor starts run the five and bury the two."""
    with db.atomic():
        hung = [reliableq.enqueue("test.hang", {}) for _ in range(2)]
        ordinary = [reliableq.enqueue("demo.noop", {}, priority=1) for _ in range(5)]
    health = tmp_path / "alive"
    first = spawn_worker("--concurrency", "2", "--grace-seconds", "1", "--health-file", str(health))
    wait_until(health.exists, timeout=15, what="the first worker's health file")

    assert first.wait(timeout=20) == 3, first.output()
    log = first.output()
    assert "2 handler thread(s) stuck past their timeout" in log
    assert all(f"job={job.id} kind=test.hang" in log for job in hung), log
    assert not health.exists(), "the health file still says the worker is alive"
    assert not Attempt.objects.filter(job_id__in=[j.id for j in ordinary]).exists()

    # A supervisor restarts it (systemd Restart=always, a Deployment): each fresh worker makes progress.
    restarts = 0
    while not all(is_status(j.id, JobStatus.SUCCEEDED)() for j in ordinary) or not all(
        is_status(j.id, JobStatus.DEAD)() for j in hung
    ):
        restarts += 1
        assert restarts <= 4, "the fleet stopped making progress"
        fresh = spawn_worker("--concurrency", "2", "--grace-seconds", "1", "--burst")
        assert fresh.wait(timeout=30) in (0, 3), fresh.output()
    for job in hung:
        assert [a.outcome for a in Attempt.objects.filter(job_id=job.id)] == [Outcome.TIMED_OUT] * 2


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
