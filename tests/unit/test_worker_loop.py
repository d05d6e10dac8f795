"""The worker's own logic, in-process, on an in-memory Store: slots, timeouts, fencing of late
results, unacknowledged claims, burst and shutdown. No database: the Store is the seam.

(The same behaviours are shown end to end, with real processes and signals, in tests/acceptance.)
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import OperationalError

import reliableq
from reliableq.queue import ClaimedJob, Finish, FinishResult, Rescued
from reliableq.registry import Limits
from reliableq.services import Retained
from reliableq.worker import Worker, WorkerConfig
from tests.support import wait_until

GATE = threading.Event()  # handlers of fake.gated wait for it
SLOW = threading.Event()


@reliableq.handler("fake.gated")
def gated(job: Any) -> None:
    assert GATE.wait(30), "the test never opened the gate"


@reliableq.handler("fake.quick")
def quick(job: Any) -> None:
    return None


@reliableq.handler("fake.stuck", timeout=0.2, max_attempts=1)
def stuck(job: Any) -> None:
    assert SLOW.wait(30), "the test never released the stuck handler"


@dataclass
class Row:
    kind: str
    status: str = "PENDING"
    attempts: int = 0
    token: uuid.UUID | None = None


@dataclass
class FakeStore:
    """The Store's contract in memory: claims mark rows RUNNING under a new token; finish is fenced by it."""

    rows: dict[uuid.UUID, Row] = field(default_factory=dict)
    limits: list[int] = field(default_factory=list)
    finishes: list[Finish] = field(default_factory=list)
    released: list[uuid.UUID] = field(default_factory=list)
    fail_next_claim_after_commit: bool = False
    fail_next_finish: bool = False  # the next finish raises before it writes anything
    down: bool = False  # every claim and finish raises, as with no server to reach
    writers: list[str] = field(default_factory=list)  # the thread that wrote each batch of ends
    on_finish: Callable[[], None] | None = None  # called on the writing thread before each batch is written
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, n: int = 1) -> list[uuid.UUID]:
        ids = [uuid.uuid4() for _ in range(n)]
        for job_id in ids:
            self.rows[job_id] = Row(kind=kind)
        return ids

    def claim(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        limits: Mapping[str, Limits],
        rescue: bool,
        refill: bool = False,
    ) -> tuple[list[ClaimedJob], list[Rescued]]:
        with self.lock:
            if self.down:
                raise OperationalError("connection failed: Connection refused")
            self.limits.append(limit)
            taken = []
            for job_id, row in self.rows.items():
                if len(taken) == limit:
                    break
                if row.status == "PENDING":
                    row.status, row.attempts, row.token = "RUNNING", row.attempts + 1, uuid.uuid4()
                    taken.append(
                        ClaimedJob(
                            id=job_id,
                            kind=row.kind,
                            queue="default",
                            priority=0,
                            payload={},
                            attempt=row.attempts,
                            max_attempts=1,
                            lease_token=row.token,
                            worker_id=worker_id,
                        )
                    )
            if self.fail_next_claim_after_commit and taken:
                self.fail_next_claim_after_commit = False
                raise OperationalError("the connection dropped during COMMIT")  # committed, unheard
            return taken, []

    def finish(self, finishes: Sequence[Finish]) -> FinishResult:
        with self.lock:
            if self.down:
                raise OperationalError("connection failed: Connection refused")
            if self.fail_next_finish:
                self.fail_next_finish = False
                raise OperationalError("the server closed the connection")
            if self.on_finish is not None:
                self.on_finish()
            self.writers.append(threading.current_thread().name)
            result = FinishResult()
            for f in finishes:
                self.finishes.append(f)
                row = self.rows[f.job_id]
                if row.status == "RUNNING" and row.token == f.lease_token:
                    row.status, row.token = f.status, None
                    result.finalized.append(f.job_id)
                else:
                    result.lost.append(f.job_id)
            return result

    def renew(self, held: Iterable[tuple[uuid.UUID, uuid.UUID]], *, lease_seconds: float) -> dict[uuid.UUID, bool]:
        with self.lock:
            return {job_id: False for job_id, token in held if self.rows[job_id].token == token}

    def mark_lost(self, held: Iterable[tuple[uuid.UUID, uuid.UUID]], *, reason: str) -> set[uuid.UUID]:
        return set()

    def release_unacknowledged(self, *, worker_id: str, known: Iterable[uuid.UUID]) -> list[uuid.UUID]:
        with self.lock:
            known = set(known)
            orphans = [
                job_id for job_id, row in self.rows.items() if row.status == "RUNNING" and row.token not in known
            ]
            for job_id in orphans:
                self.rows[job_id].status, self.rows[job_id].token = "PENDING", None
            self.released += orphans
            return orphans

    def has_work(self, queues: Sequence[str]) -> bool:
        with self.lock:
            return any(row.status in ("PENDING", "RUNNING") for row in self.rows.values())

    def schedule_cron(self, *, late_seconds: float) -> float | None:
        return None

    def sync_schedules(self) -> None:
        pass

    def lead(self, name: str, *, holder: str, seconds: float, token: uuid.UUID | None) -> uuid.UUID | None:
        return token or uuid.uuid4()  # the only worker: always the leader

    def resign(self, name: str, *, token: uuid.UUID) -> bool:
        return True

    def rescue(self) -> list[Rescued]:
        return []

    def cascade(self) -> int:
        return 0

    def wake_timeouts(self) -> int:
        return 0

    def handed_on(self, *, older_than: float) -> bool:
        return False

    def retain(self) -> Retained:
        return Retained()

    def guard_claims(self, queues: Sequence[str]) -> None:
        pass

    def worker_seen(self, worker_id: str, *, busy: int, start: dict | None = None) -> bool:
        return True

    def worker_stopped(self, worker_id: str) -> None:
        pass

    def record_progress(self, reports: Iterable) -> int:
        return 0

    def reset(self) -> None:
        pass

    def connected(self) -> bool:
        return True


def start(store: FakeStore, **config: Any) -> tuple[Worker, threading.Thread, dict[str, int]]:
    options = {"concurrency": 3, "poll_seconds": 0.02, "listen": False, "lease_seconds": 30, "grace_seconds": 5}
    worker = Worker(WorkerConfig(**{**options, **config}), store=store)
    outcome: dict[str, int] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("code", worker.run(install_signals=False)), daemon=True)
    thread.start()
    return worker, thread, outcome


@pytest.fixture(autouse=True)
def gates():
    GATE.clear()
    SLOW.clear()
    yield
    GATE.set()
    SLOW.set()


def test_claims_are_sized_to_free_slots_and_never_exceed_the_concurrency():
    store = FakeStore()
    store.add("fake.gated", 7)
    worker, thread, outcome = start(store, concurrency=3)
    wait_until(
        lambda: sum(r.status == "RUNNING" for r in store.rows.values()) == 3, timeout=10, what="three jobs running"
    )
    assert max(store.limits) == 3 and sum(r.status == "RUNNING" for r in store.rows.values()) == 3
    GATE.set()
    wait_until(lambda: all(r.status == "SUCCEEDED" for r in store.rows.values()), timeout=10, what="every job done")
    worker.request_stop()
    thread.join(10)
    assert outcome == {"code": 0}
    assert all(limit <= 3 for limit in store.limits)
    assert worker.claimed == worker.finished == 7


def test_a_stop_asked_while_the_database_is_away_still_ends_with_the_grace_period():
    store = FakeStore()
    store.add("fake.gated", 2)
    worker, thread, outcome = start(store, concurrency=2, grace_seconds=0.5)
    wait_until(lambda: len(worker.ledger) == 2, timeout=10, what="two jobs running")
    store.down = True
    GATE.set()  # the handlers end; their ends, which hold every slot, cannot be written
    wait_until(lambda: worker.outage.down, timeout=10, what="the write to fail")
    worker.request_stop()
    thread.join(10)
    assert not thread.is_alive(), "the worker kept retrying past its grace period"
    assert outcome == {"code": 0}
    assert not [f for f in store.finishes if f.outcome == "SUCCEEDED"], "nothing was written"


def test_a_stuck_handler_is_timed_out_its_slot_taken_by_a_new_thread_and_its_late_result_dropped():
    SLOW.clear()
    store = FakeStore()
    [job_id] = store.add("fake.stuck")
    worker, thread, _ = start(store, concurrency=2)
    wait_until(lambda: any(f.outcome == "TIMED_OUT" for f in store.finishes), timeout=10, what="the timeout")
    assert store.rows[job_id].status == "DEAD"  # max_attempts=1: the timeout buries it
    others = store.add("fake.quick", 3)
    # The stuck thread runs on, but no longer holds a slot: both slots take the new jobs.
    wait_until(lambda: all(store.rows[i].status == "SUCCEEDED" for i in others), timeout=10, what="the others")
    assert [p.id for p in worker._pool.stuck()] == [job_id]
    SLOW.set()
    wait_until(lambda: not worker._pool.stuck(), timeout=10, what="the stuck thread to return")
    assert not [f for f in store.finishes if f.job_id == job_id and f.outcome == "SUCCEEDED"], "late result written"
    assert store.rows[job_id].status == "DEAD"
    worker.request_stop()
    thread.join(10)


def test_once_every_slots_thread_is_stuck_the_worker_stops_claiming_and_exits_3():
    SLOW.clear()
    store = FakeStore()
    store.add("fake.stuck", 2)
    _worker, thread, outcome = start(store, concurrency=2)
    thread.join(10)
    assert outcome == {"code": 3}
    later = store.add("fake.quick")
    assert store.rows[later[0]].status == "PENDING"
    SLOW.set()


def test_a_claim_whose_commit_went_unheard_is_released_before_the_next_claim():
    store = FakeStore(fail_next_claim_after_commit=True)
    ids = store.add("fake.quick", 2)
    worker, thread, _ = start(store, concurrency=2)
    wait_until(lambda: all(store.rows[i].status == "SUCCEEDED" for i in ids), timeout=10, what="both jobs done")
    assert sorted(store.released) == sorted(ids)
    assert [store.rows[i].attempts for i in ids] == [2, 2]  # the unheard claim counted
    worker.request_stop()
    thread.join(10)


def test_burst_exits_0_once_nothing_is_due_or_running():
    store = FakeStore()
    store.add("fake.quick", 5)
    _worker, thread, outcome = start(store, burst=True)
    thread.join(10)
    assert outcome == {"code": 0}
    assert all(r.status == "SUCCEEDED" for r in store.rows.values())


def test_a_stop_request_claims_nothing_more_and_waits_for_running_handlers():
    store = FakeStore()
    store.add("fake.gated", 4)
    worker, thread, outcome = start(store, concurrency=2)
    wait_until(
        lambda: sum(r.status == "RUNNING" for r in store.rows.values()) == 2, timeout=10, what="two jobs running"
    )
    worker.request_stop()
    GATE.set()
    thread.join(10)
    assert outcome == {"code": 0}
    assert sorted(r.status for r in store.rows.values()) == ["PENDING", "PENDING", "SUCCEEDED", "SUCCEEDED"]


def test_when_the_grace_period_runs_out_the_worker_exits_leaving_its_leases_to_expire():
    store = FakeStore()
    [job_id] = store.add("fake.gated")
    worker, thread, outcome = start(store, concurrency=1, grace_seconds=0.2)
    wait_until(lambda: store.rows[job_id].status == "RUNNING", timeout=10, what="the job running")
    worker.request_stop()
    thread.join(10)
    assert outcome == {"code": 0}
    assert store.rows[job_id].status == "RUNNING", "never marked finished: its lease will expire"
    assert not [f for f in store.finishes if f.job_id == job_id]


def test_successes_are_logged_at_debug_and_summed_up_once_an_interval_at_info(monkeypatch, caplog):
    monkeypatch.setattr("reliableq.worker.loop.SUMMARY_SECONDS", 0.2)
    caplog.set_level(logging.INFO, logger="reliableq")
    store = FakeStore()
    store.add("fake.quick", 5)
    worker, thread, _ = start(store)

    def summed() -> int:
        lines = [r.getMessage() for r in caplog.records if "attempt(s) ended in the last" in r.getMessage()]
        return sum(int(line.split(": ")[1].split(" ")[0]) for line in lines)

    wait_until(lambda: summed() == 5, timeout=10, what="summary lines adding up to the five jobs")
    worker.request_stop()
    thread.join(10)
    summary = next(r.getMessage() for r in caplog.records if "attempt(s) ended" in r.getMessage())
    assert "succeeded); " in summary and " in flight" in summary, summary
    # One line an interval at INFO, not one a job: a success alone is a DEBUG record.
    assert not [r for r in caplog.records if "job=" in r.getMessage()], caplog.text


def test_ends_that_every_slot_waits_on_are_written_by_the_loop_and_the_rest_by_the_writer():
    store = FakeStore()
    store.add("fake.gated", 6)
    worker, thread, _ = start(store, concurrency=2)
    free_at_write: list[tuple[str, int]] = []
    store.on_finish = lambda: free_at_write.append((threading.current_thread().name, worker._pool.free))
    GATE.set()  # no end before the observer is in place
    wait_until(lambda: all(r.status == "SUCCEEDED" for r in store.rows.values()), timeout=10, what="every job done")
    # The first end arrives while both slots are held: the loop writes it itself; and the loop
    # writes only then (how later ends group into batches depends on timing).
    assert store.writers[0] == thread.name, store.writers
    assert all(free == 0 for name, free in free_at_write if name == thread.name), free_at_write
    written = len(store.writers)
    store.add("fake.quick", 1)  # one job in two slots: its end is written by the writer while a slot is free
    wait_until(lambda: all(r.status == "SUCCEEDED" for r in store.rows.values()), timeout=10, what="the last job done")
    worker.request_stop()
    thread.join(10)
    assert store.writers[written:] == ["reliableq-completer"], store.writers
    assert worker.finished == 7 and len(store.finishes) == 7


def test_a_failed_write_on_the_loops_thread_keeps_the_ends_and_writes_them_again():
    store = FakeStore(fail_next_finish=True)
    store.add("fake.quick", 2)
    worker, thread, outcome = start(store, concurrency=2, burst=True)
    thread.join(10)
    assert outcome == {"code": 0}
    assert [r.status for r in store.rows.values()] == ["SUCCEEDED", "SUCCEEDED"]
    # The failed batch was written again on the loop's thread (no slot was freed by the failure),
    # and nothing was lost or written twice.
    assert store.writers[0] == thread.name, store.writers
    assert len(store.finishes) == 2 and worker.finished == 2


def test_a_started_worker_leaves_its_startup_objects_out_of_the_collectors_walks() -> None:
    import gc

    from reliableq.worker.loop import freeze_startup_objects

    held: list[int] = []  # a container, tracked by the collector
    gc.unfreeze()
    try:
        assert any(o is held for o in gc.get_objects())
        freeze_startup_objects()
        assert gc.get_freeze_count() > 0
        assert not any(o is held for o in gc.get_objects()), "frozen objects are no longer tracked as young"
    finally:
        gc.unfreeze()
