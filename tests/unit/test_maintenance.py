"""The maintenance service in-process: only the lease holder does the duties, each once per its
interval; a worker that loses the lease stops; a new leader does each duty at once."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from reliableq.services import Retained
from reliableq.worker.maintenance import LEAD_FLOOR_SECONDS, Maintenance, lead_seconds


class SharedLease:
    """A leadership table in memory: one holder, taken over only when released or expired."""

    def __init__(self) -> None:
        self.holder: str | None = None
        self.token: uuid.UUID | None = None


class Store:
    def __init__(self, lease: SharedLease, name: str) -> None:
        self.lease, self.name, self.calls = lease, name, Counter[str]()
        self.old_rows = 0  # retention rounds that will find old rows left
        self.synced = 0
        self.wait: float | None = None  # what a schedule round answers: the seconds until the next slot
        self.late: list[float] = []

    def lead(self, duty: str, *, holder: str, seconds: float, token: uuid.UUID | None) -> uuid.UUID | None:
        if self.lease.holder in (None, holder) and (token is None or token == self.lease.token):
            if self.lease.holder is None:
                self.lease.holder, self.lease.token = holder, uuid.uuid4()
            return self.lease.token
        return None

    def resign(self, duty: str, *, token: uuid.UUID) -> bool:
        if token == self.lease.token:
            self.lease.holder = self.lease.token = None
            return True
        return False

    def rescue(self) -> list[Any]:
        self.calls["rescue"] += 1
        return []

    def handed_on(self, *, older_than: float) -> bool:
        self.calls["handed_on"] += 1
        return False

    def schedule_cron(self, *, late_seconds: float) -> float | None:
        self.calls["schedule"] += 1
        self.late.append(late_seconds)
        return self.wait

    def sync_schedules(self) -> None:
        self.synced += 1

    def retain(self) -> Retained:
        self.calls["retain"] += 1
        deleted = Retained(SUCCEEDED=1000 if self.old_rows else 0)
        deleted.more = self.old_rows > 1
        self.old_rows = max(0, self.old_rows - 1)
        return deleted

    def guard_claims(self, queues: Sequence[str]) -> None:
        self.calls["guard"] += 1


def service(store: Store, worker_id: str) -> Maintenance:
    return Maintenance(store, worker_id=worker_id, queues=("default",), lease_seconds=3.0, rescue_seconds=1.0,
                       schedule_seconds=5.0, retention_seconds=60.0)  # fmt: skip


def test_of_many_workers_only_the_leader_rescues_cascades_schedules_and_retains():
    lease = SharedLease()
    stores = [Store(lease, f"w{n}") for n in range(50)]
    services = [service(store, store.name) for store in stores]
    for second in range(10):
        for svc in services:
            svc.tick(float(second))
    assert [s.leading for s in services].count(True) == 1
    leader = stores[0]
    assert leader.calls == Counter(rescue=10, guard=10, handed_on=10, schedule=2, retain=1)
    assert all(not s.calls for s in stores[1:]), "the other 49 sent no maintenance statement"
    assert [s.synced for s in stores] == [1] * 50, "each wrote the code's schedules once, at its start"


def test_after_the_leader_resigns_another_worker_takes_the_duties_and_does_each_at_once():
    lease = SharedLease()
    a, b = Store(lease, "a"), Store(lease, "b")
    first, second = service(a, "a"), service(b, "b")
    first.tick(0.0)
    second.tick(0.0)
    first.resign()
    second.tick(1.0)  # its next try for the lease is due (every lease/3 = 1 s)
    assert second.leading and not first.leading
    assert b.calls == Counter(rescue=1, guard=1, handed_on=1, schedule=1, retain=1)


def test_while_old_rows_are_left_retention_goes_on_at_every_tick():
    store = Store(SharedLease(), "w")
    store.old_rows = 3  # three rounds' worth: the first two end with more left
    leader = service(store, "w")
    for second in range(6):
        leader.tick(float(second))
    assert store.calls["retain"] == 3  # at 0, 1 and 2 s; then back to every 60 s


def test_the_duty_lease_is_three_rescue_intervals_floored_and_never_longer_than_the_jobs_lease():
    assert lead_seconds(30.0, 1.0) == 3.0  # the defaults: renewed and bid for every second
    assert lead_seconds(30.0, 0.1) == LEAD_FLOOR_SECONDS  # a tiny POLL_SECONDS: a stall must not cost the lease
    assert lead_seconds(1.0, 5.0) == 1.0  # a worker whose jobs' lease is shorter than three intervals
    assert lead_seconds(600.0, 1.0) == 3.0  # long job leases no longer hold the fleet's rescues back


def test_a_schedule_round_comes_again_when_the_next_slot_does_and_at_least_every_interval():
    store = Store(SharedLease(), "w")
    leader = service(store, "w")  # schedule_seconds 5, lease 3 s: lead_seconds 3
    store.wait = 1.5  # a slot 1.5 s away
    for tenth in range(0, 40):
        leader.tick(tenth / 10)
    assert store.calls["schedule"] == 3  # at 0, 1.5 and 3.0 s
    store.wait = None  # no enabled schedule: back to every 5 s
    for tenth in range(40, 130):
        leader.tick(tenth / 10)
    assert store.calls["schedule"] == 5  # at 4.5 and 9.5 s
    # A slot older than two intervals and two duty leases when a round reaches it was missed.
    assert set(store.late) == {2 * (5.0 + 3.0)}
