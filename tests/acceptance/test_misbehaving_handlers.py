"""Handlers that misbehave cannot stop the queue (issue 26): real workers, real signals, real crashes.

async def handlers awaited on the worker's loop; isolation="process" children that segfault, hang,
ignore SIGTERM, hold the GIL for three leases, or leak 200 MB; sync handlers that return a coroutine.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
from pathlib import Path

import pytest

import reliableq
from charges.models import ChargeRequest
from reliableq import services
from reliableq.models import Attempt, Job, JobStatus, Outcome, ReturnValue
from reliableq.queue import db
from tests.support import wait_until

from .helpers import is_status, max_in_flight

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def outcomes(job: Job) -> list[str]:
    return list(Attempt.objects.filter(job_id=job.id).order_by("number").values_list("outcome", flat=True))


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no thread count for {pid}")


def children_of(pid: int) -> set[int]:
    """Processes whose parent is `pid` (the worker's child processes)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- async def handlers ---------------------------------------------------------------------------


def test_async_handlers_are_awaited_and_write_their_rows(spawn_worker):
    """Before: three jobs of an async handler ended SUCCEEDED in one attempt, and 0 rows were written."""
    jobs = [reliableq.enqueue("test.async_echo", {"n": n}) for n in range(3)]
    worker = spawn_worker("--burst")
    assert worker.wait(timeout=30) == 0, worker.output()

    assert set(ChargeRequest.objects.values_list("idempotency_key", flat=True)) == {f"async:{j.id}" for j in jobs}
    for job in jobs:
        assert outcomes(job) == [Outcome.SUCCEEDED]
        assert ReturnValue.objects.get(job_id=job.id).value == {"pid": worker.pid}  # on the worker's own loop
    assert "was never awaited" not in worker.output()


def test_async_attempts_take_no_thread_each_and_share_the_concurrency(spawn_worker):
    with db.atomic():
        slow = [reliableq.enqueue("test.async_sleep", {"seconds": 1.5}) for _ in range(60)]
        sync = [reliableq.enqueue("test.sleep", {"seconds": 1.5}) for _ in range(4)]
    worker = spawn_worker("--concurrency", "40", "--burst")
    wait_until(lambda: Job.objects.filter(status=JobStatus.RUNNING).count() >= 40, timeout=20, what="40 in flight")
    threads = threads_of(worker.pid)
    assert worker.wait(timeout=60) == 0, worker.output()

    rows = list(Attempt.objects.filter(job_id__in=[j.id for j in slow + sync]))
    assert len(rows) == 64 and {a.outcome for a in rows} == {Outcome.SUCCEEDED}
    # --concurrency bounds sync and async handlers in flight together.
    assert max_in_flight((a.started_at, a.finished_at) for a in rows) == 40
    # 40 attempts in flight on a handful of threads: the loop, the heartbeat, the listener, <= 4 handlers.
    assert threads < 15, f"{threads} threads for 40 attempts in flight"


def test_an_async_handler_past_its_timeout_is_cancelled_and_its_slot_freed(spawn_worker):
    hung = reliableq.enqueue("test.async_hang", {})
    after = [reliableq.enqueue("test.async_sleep", {"seconds": 0.1}, priority=1) for _ in range(3)]
    worker = spawn_worker("--concurrency", "1", "--burst")
    assert worker.wait(timeout=30) == 0, worker.output()

    [timed_out] = Attempt.objects.filter(job_id=hung.id)
    assert timed_out.outcome == Outcome.TIMED_OUT and "timed out after 1s" in timed_out.error
    assert is_status(hung.id, JobStatus.DEAD)()
    for job in after:
        [attempt] = Attempt.objects.filter(job_id=job.id)
        assert attempt.outcome == Outcome.SUCCEEDED and attempt.started_at >= timed_out.finished_at


def test_an_async_handler_sees_cancel_requested(spawn_worker):
    job = reliableq.enqueue("test.async_cancellable", {})
    spawn_worker()
    wait_until(is_status(job.id, JobStatus.RUNNING), timeout=15, what="the claim")
    services.cancel(job.id)
    wait_until(is_status(job.id, JobStatus.CANCELLED), timeout=15, what="the handler to stop")
    assert outcomes(job) == [Outcome.CANCELLED]


def test_a_sync_handler_that_returns_a_coroutine_fails_and_never_succeeds(spawn_worker):
    job = reliableq.enqueue("test.returns_coroutine", {})
    worker = spawn_worker("--burst")
    assert worker.wait(timeout=30) == 0, worker.output()

    [attempt] = Attempt.objects.filter(job_id=job.id)
    assert attempt.outcome == Outcome.FAILED_PERMANENT
    assert "returned coroutine, an awaitable, instead of running" in attempt.error
    assert "declare it `async def`" in attempt.error
    assert is_status(job.id, JobStatus.DEAD)()
    assert "was never awaited" not in worker.output()


# -- isolation="process" --------------------------------------------------------------------------


def test_an_isolated_handler_runs_in_a_child_that_serves_many_attempts(spawn_worker):
    jobs = [reliableq.enqueue("test.isolated_echo", {"n": n}) for n in range(4)]
    worker = spawn_worker("--concurrency", "1", "--burst")
    assert worker.wait(timeout=60) == 0, worker.output()

    pids = {ReturnValue.objects.get(job_id=j.id).value["pid"] for j in jobs}
    assert len(pids) == 1 and worker.pid not in pids, (pids, worker.pid)
    assert ChargeRequest.objects.count() == 4  # the sync ORM, from the child
    assert all(outcomes(j) == [Outcome.SUCCEEDED] for j in jobs)


def test_a_segfaulting_child_fails_only_its_own_attempts(spawn_worker):
    """Before: a SIGSEGV beside six innocent 1 s jobs (max_attempts=2) sent three of them DEAD too."""
    with db.atomic():
        poison = reliableq.enqueue("test.segfault", {})
        innocent = [reliableq.enqueue("test.sleep", {"seconds": 1}, max_attempts=2) for _ in range(3)] + [
            reliableq.enqueue("test.isolated_echo", {"seconds": 1}, max_attempts=2) for _ in range(3)
        ]
    worker = spawn_worker("--concurrency", "4")
    wait_until(is_status(poison.id, JobStatus.DEAD), timeout=60, what="the poison job to be buried")
    wait_until(lambda: all(is_status(j.id, JobStatus.SUCCEEDED)() for j in innocent), timeout=60, what="the six")

    assert outcomes(poison) == [Outcome.FAILED_TRANSIENT] * 3
    for attempt in Attempt.objects.filter(job_id=poison.id):
        assert "died of SIGSEGV (signal 11)" in attempt.error, attempt.error
    for job in innocent:
        assert outcomes(job) == [Outcome.SUCCEEDED], (job.kind, outcomes(job))
    assert not Attempt.objects.filter(outcome=Outcome.LEASE_EXPIRED).exists()
    assert worker.proc.poll() is None, "the worker itself died"


def test_a_child_that_dies_by_os_exit_or_sigkill_fails_its_attempt_with_the_reason(spawn_worker):
    exited = reliableq.enqueue("test.isolated_exit", {"code": 3})
    job = reliableq.enqueue("test.isolated_hang", {}, max_attempts=1, priority=1)
    worker = spawn_worker("--concurrency", "1")
    wait_until(is_status(exited.id, JobStatus.DEAD), timeout=30, what="the os._exit attempt to fail")
    [attempt] = Attempt.objects.filter(job_id=exited.id)
    assert attempt.outcome == Outcome.FAILED_TRANSIENT and "exited with status 3" in attempt.error
    wait_until(is_status(job.id, JobStatus.RUNNING), timeout=30, what="the claim")
    child = wait_until(lambda: children_of(worker.pid), timeout=30, what="the child")
    os.kill(next(iter(child)), signal.SIGKILL)  # the OOM killer, say
    wait_until(is_status(job.id, JobStatus.DEAD), timeout=30, what="the attempt to fail")

    [attempt] = Attempt.objects.filter(job_id=job.id)
    assert attempt.outcome == Outcome.FAILED_TRANSIENT and "died of SIGKILL (signal 9)" in attempt.error
    assert worker.proc.poll() is None


def test_an_isolated_handler_past_its_timeout_is_killed_and_its_slot_freed_at_once(spawn_worker):
    """Stubborn: it ignores SIGTERM, so the SIGKILL five seconds later ends it; the slot is free before."""
    worker = spawn_worker("--concurrency", "1")
    # A child ready first: the hang's 1 s timeout must not pass while its child sets Django up (an
    # attempt stopped before it began never runs: the test below).
    warm = reliableq.enqueue("test.isolated_noop", {})
    wait_until(is_status(warm.id, JobStatus.SUCCEEDED), timeout=30, what="a child to start")
    hung = reliableq.enqueue("test.isolated_hang", {"stubborn": True})
    wait_until(is_status(hung.id, JobStatus.RUNNING), timeout=30, what="the claim")
    [child] = wait_until(lambda: children_of(worker.pid), timeout=30, what="the child")
    after = reliableq.enqueue("demo.noop", {})
    wait_until(is_status(after.id, JobStatus.SUCCEEDED), timeout=30, what="the job behind the hung one")
    [timed_out] = Attempt.objects.filter(job_id=hung.id)
    [next_one] = Attempt.objects.filter(job_id=after.id)

    assert timed_out.outcome == Outcome.TIMED_OUT
    assert next_one.started_at - timed_out.finished_at < dt.timedelta(seconds=2)  # not after the SIGKILL
    assert alive(child), "the stubborn child should still be waiting for its SIGKILL"
    wait_until(lambda: not alive(child), timeout=30, what="the SIGKILL of the child")  # 5 s after the SIGTERM
    assert worker.proc.poll() is None


def test_an_isolated_attempt_timed_out_before_its_child_started_never_runs_in_it(spawn_worker, tmp_path):
    """Before: the kill found no child running the attempt yet and did nothing; the child, once
    started, ran the stubborn handler for good, outside any slot (found under a loaded CI)."""
    marker = tmp_path / "began"
    hung = reliableq.enqueue("test.isolated_hang_soon", {"marker": str(marker)})
    worker = spawn_worker("--concurrency", "1")
    wait_until(is_status(hung.id, JobStatus.DEAD), timeout=30, what="the timeout")
    # Two attempts behind it, in a child started after the first: by then the first has started too.
    for _ in range(2):
        after = reliableq.enqueue("test.isolated_noop", {})
        wait_until(is_status(after.id, JobStatus.SUCCEEDED), timeout=30, what="an attempt behind it")

    [attempt] = Attempt.objects.filter(job_id=hung.id)
    assert attempt.outcome == Outcome.TIMED_OUT
    assert not marker.exists(), "the timed-out attempt began in a child after its slot was freed"
    assert worker.proc.poll() is None


def test_a_cancel_request_reaches_a_handler_in_a_child(spawn_worker):
    job = reliableq.enqueue("test.isolated_cancellable", {})
    spawn_worker()
    wait_until(is_status(job.id, JobStatus.RUNNING), timeout=30, what="the claim")
    services.cancel(job.id)
    wait_until(is_status(job.id, JobStatus.CANCELLED), timeout=30, what="the child's handler to stop")
    assert outcomes(job) == [Outcome.CANCELLED]


GIL_SECONDS = 4  # more than three leases of 1 s


def test_a_gil_holding_c_call_in_a_child_does_not_expire_its_lease(spawn_worker):
    job = reliableq.enqueue("test.gil_isolated", {"seconds": GIL_SECONDS})
    env = {"RELIABLEQ_LEASE_SECONDS": "1"}
    spawn_worker(env=env)
    spawn_worker(env=env)  # the one that would take the job back if the lease expired
    wait_until(is_status(job.id, JobStatus.SUCCEEDED), timeout=60, what="the job")
    assert outcomes(job) == [Outcome.SUCCEEDED]
    assert not Attempt.objects.filter(outcome=Outcome.LEASE_EXPIRED).exists()


def test_the_same_call_on_a_thread_starves_the_heartbeat_which_is_why_process_isolation_exists(spawn_worker):
    """The boundary of isolation="thread", shown: while the C call holds the GIL no thread of the
    worker runs, its heartbeat included; the lease expires and another worker runs the job again."""
    job = reliableq.enqueue("test.gil_thread", {"seconds": GIL_SECONDS})
    env = {"RELIABLEQ_LEASE_SECONDS": "1"}
    spawn_worker(env=env)
    spawn_worker(env=env)
    wait_until(lambda: Attempt.objects.filter(job_id=job.id, outcome=Outcome.LEASE_EXPIRED).exists(), timeout=60)


def test_a_leaking_child_is_replaced_once_over_child_max_memory_mb(spawn_worker):
    jobs = [reliableq.enqueue("test.leak", {"mb": 200}, priority=n) for n in range(3)]
    worker = spawn_worker("--concurrency", "1", "--burst", env={"RELIABLEQ_CHILD_MAX_MEMORY_MB": "150"})
    assert worker.wait(timeout=90) == 0, worker.output()

    pids = [ReturnValue.objects.get(job_id=j.id).value["pid"] for j in jobs]
    assert len(set(pids)) == 3, pids  # every attempt left its child over the bound
    assert worker.output().count("(CHILD_MAX_MEMORY_MB is 150)") == 3
    assert all(outcomes(j) == [Outcome.SUCCEEDED] for j in jobs)


def test_child_max_jobs_replaces_a_child_between_attempts(spawn_worker):
    jobs = [reliableq.enqueue("test.isolated_echo", {}, priority=n) for n in range(5)]
    worker = spawn_worker("--concurrency", "1", "--burst", env={"RELIABLEQ_CHILD_MAX_JOBS": "2"})
    assert worker.wait(timeout=90) == 0, worker.output()

    pids = [ReturnValue.objects.get(job_id=j.id).value["pid"] for j in jobs]
    assert [pids.index(p) for p in pids] == [0, 0, 2, 2, 4], pids


def test_a_workers_children_go_when_it_is_killed(spawn_worker):
    job = reliableq.enqueue("test.isolated_hang", {})
    worker = spawn_worker()
    wait_until(is_status(job.id, JobStatus.RUNNING), timeout=30, what="the claim")
    child = wait_until(lambda: children_of(worker.pid), timeout=30, what="the child")
    worker.signal(signal.SIGKILL)
    worker.wait(timeout=10)
    wait_until(lambda: not any(alive(pid) for pid in child), timeout=10, what="the child to see its worker go")
