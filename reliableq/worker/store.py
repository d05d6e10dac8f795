"""What the worker asks of the database, as one narrow interface.

The loop and its parts hold no SQL: they call a Store. DatabaseStore is the real one (each call
is one function of reliableq.queue, services, scheduler or schedules, on the calling thread's
connection to the queue's database);
tests of the loop's own logic (slots, timeouts, linger, shutdown) pass an in-memory Store.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from .. import floors, registry, scheduler, schedules, services
from .. import queue as jobqueue
from ..queue import ClaimedJob, Finish, FinishResult, Rescued, db, events, leadership, workers, workflows
from ..registry import Limits

Lease = tuple[uuid.UUID, uuid.UUID]  # (job id, lease token)


class Store(Protocol):
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
        """`refill`: a claim only for slots that finishes freed (not after a wake or a poll), which may
        pass over limited kinds that had nothing due a moment ago (reliableq.floors)."""

    def finish(self, finishes: Sequence[Finish]) -> FinishResult: ...

    def renew(self, held: Iterable[Lease], *, lease_seconds: float) -> dict[uuid.UUID, bool]:
        """The job ids still owned, each with whether an operator asked to cancel it."""

    def mark_lost(self, held: Iterable[Lease], *, reason: str) -> set[uuid.UUID]: ...

    def record_progress(self, reports: Iterable[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]) -> int:
        """Write the handlers' latest progress, fenced by their lease tokens."""

    def worker_seen(self, worker_id: str, *, busy: int, start: dict[str, Any] | None = None) -> bool:
        """This worker is alive with `busy` slots in use (with `start`: its row, made or reset); False when
        it has no row yet (its start could not be recorded)."""

    def worker_stopped(self, worker_id: str) -> None: ...

    def release_unacknowledged(self, *, worker_id: str, known: Iterable[uuid.UUID]) -> list[uuid.UUID]: ...

    def has_work(self, queues: Sequence[str]) -> bool: ...

    def schedule_cron(self, *, late_seconds: float) -> float | None:
        """Make the jobs of the schedules' due slots; the seconds until the next comes due (None: none will)."""

    def sync_schedules(self) -> None:
        """Write the schedules this worker's code declares to their rows (once, when it starts)."""

    def lead(self, name: str, *, holder: str, seconds: float, token: uuid.UUID | None) -> uuid.UUID | None: ...

    def resign(self, name: str, *, token: uuid.UUID) -> bool: ...

    def rescue(self) -> list[Rescued]: ...

    def cascade(self) -> int:
        """Cancel onward from workflow members a bounded cancel handed on, in one short transaction;
        how many members it took (0: nothing was handed on)."""

    def handed_on(self, *, older_than: float) -> bool:
        """Whether a cancel handed on more than `older_than` seconds ago waits still (nobody took it up)."""

    def wake_timeouts(self) -> int:
        """Make PENDING the jobs whose wait for an event timed out; how many."""

    def retain(self) -> services.Retained: ...

    def guard_claims(self, queues: Sequence[str]) -> None:
        """Analyze the job and attempt tables if they outgrew their statistics, or if stale statistics
        would send a claim of these queues off its index."""

    def reset(self) -> None:
        """Drop this thread's connection after an error; the next call opens a fresh one."""

    def connected(self) -> bool:
        """Whether this thread holds an open connection (after a reset(): whether a call has since
        connected, and so reached the database)."""


class DatabaseStore:
    """The Store on PostgreSQL, through the calling thread's Django connection to the queue's database.

    It keeps where this worker's claims and rescues start reading their indexes (reliableq.floors).
    """

    def __init__(self) -> None:
        self._floors = floors.ClaimFloors()
        self._rescue_floor = floors.RescueFloor()

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
        return jobqueue.claim(
            worker_id=worker_id,
            queues=queues,
            limit=limit,
            lease_seconds=lease_seconds,
            limits=limits,
            rescue=rescue,
            floors=self._floors,
            refill=refill,
        )

    def finish(self, finishes: Sequence[Finish]) -> FinishResult:
        return jobqueue.finish(finishes)

    def renew(self, held: Iterable[Lease], *, lease_seconds: float) -> dict[uuid.UUID, bool]:
        return jobqueue.renew(held, lease_seconds=lease_seconds)

    def mark_lost(self, held: Iterable[Lease], *, reason: str) -> set[uuid.UUID]:
        return jobqueue.mark_lost(held, reason=reason)

    def record_progress(self, reports: Iterable[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]) -> int:
        return jobqueue.record_progress(reports)

    def worker_seen(self, worker_id: str, *, busy: int, start: dict[str, Any] | None = None) -> bool:
        if start is not None:
            workers.started(worker_id=worker_id, **start)
            return True
        return workers.seen(worker_id, busy)

    def worker_stopped(self, worker_id: str) -> None:
        workers.stopped(worker_id)

    def release_unacknowledged(self, *, worker_id: str, known: Iterable[uuid.UUID]) -> list[uuid.UUID]:
        return jobqueue.release_unacknowledged(worker_id=worker_id, known=known)

    def has_work(self, queues: Sequence[str]) -> bool:
        return services.has_work(tuple(queues))

    def schedule_cron(self, *, late_seconds: float) -> float | None:
        return scheduler.serve(late_seconds=late_seconds)

    def sync_schedules(self) -> None:
        schedules.sync()

    def lead(self, name: str, *, holder: str, seconds: float, token: uuid.UUID | None) -> uuid.UUID | None:
        return leadership.lead(name, holder=holder, seconds=seconds, token=token)

    def resign(self, name: str, *, token: uuid.UUID) -> bool:
        return leadership.resign(name, token=token)

    def rescue(self) -> list[Rescued]:
        return jobqueue.rescue(self._rescue_floor)

    def cascade(self) -> int:
        return jobqueue.cascade()[0]

    def handed_on(self, *, older_than: float) -> bool:
        return workflows.handed_on(older_than=older_than)

    def wake_timeouts(self) -> int:
        return events.wake_timeouts()

    def retain(self) -> services.Retained:
        return services.retain()

    def guard_claims(self, queues: Sequence[str]) -> None:
        jobqueue.guard_tables()
        jobqueue.guard_claims(queues, fair=[kind for kind, lim in registry.limits().items() if lim.fair])

    def reset(self) -> None:
        db.connection().close()

    def connected(self) -> bool:
        return db.connection().connection is not None
