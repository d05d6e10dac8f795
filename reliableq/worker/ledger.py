"""The attempts this process is running: by lease token for the loop, by job for the heartbeat."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

from ..queue import ClaimedJob


@dataclass(slots=True)
class InFlight:
    job: ClaimedJob
    deadline: float  # monotonic; past it the attempt is recorded TIMED_OUT
    timed_out: bool = False


class Ledger:
    """In-flight attempts (the loop's thread only) and the leases to renew (shared with the heartbeat).

    An attempt stays in flight, holding its slot, until its end is written; its lease is renewed
    until then too, unless the attempt was found lost or timed out.
    """

    def __init__(self) -> None:
        self._inflight: dict[uuid.UUID, InFlight] = {}  # lease token -> attempt
        self._held: dict[uuid.UUID, uuid.UUID] = {}  # job id -> lease token, renewed by the heartbeat
        self._progress: dict[uuid.UUID, tuple[uuid.UUID, dict[str, Any]]] = {}  # token -> (job id, latest)
        self._lock = threading.Lock()

    def add(self, job: ClaimedJob, deadline: float) -> None:
        self._inflight[job.lease_token] = InFlight(job=job, deadline=deadline)
        with self._lock:
            self._held[job.id] = job.lease_token
        object.__setattr__(job, "_sink", self.report_progress)

    def report_progress(self, job: ClaimedJob, value: dict[str, Any]) -> None:
        """job.progress(), from any thread: the latest value waits for the heartbeat's next write."""
        with self._lock:
            self._progress[job.lease_token] = (job.id, value)

    def take_progress(self) -> list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]:
        """The reports since the last call, as (job id, lease token, value), for the heartbeat to write."""
        with self._lock:
            taken, self._progress = self._progress, {}
        return [(job_id, token, value) for token, (job_id, value) in taken.items()]

    def get(self, token: uuid.UUID) -> InFlight | None:
        return self._inflight.get(token)

    def remove(self, token: uuid.UUID) -> None:
        self._inflight.pop(token, None)

    def tokens(self) -> list[uuid.UUID]:
        return list(self._inflight)

    def __len__(self) -> int:
        return len(self._inflight)

    def held(self) -> dict[uuid.UUID, uuid.UUID]:
        """A copy of the leases to renew (called from the heartbeat's thread)."""
        with self._lock:
            return dict(self._held)

    def drop(self, job_id: uuid.UUID, token: uuid.UUID) -> None:
        """Stop renewing this lease (its end is written, or another owner has the job)."""
        with self._lock:
            if self._held.get(job_id) == token:
                del self._held[job_id]

    def overdue(self, now: float) -> list[InFlight]:
        """Attempts past their deadline not yet marked so; marks them timed out."""
        late = [f for f in self._inflight.values() if not f.timed_out and now >= f.deadline]
        for flight in late:
            flight.timed_out = True
        return late

    def until_next_deadline(self, now: float, cap: float) -> float:
        """Seconds until the earliest deadline not yet passed, at most `cap`."""
        pending = [f.deadline - now for f in self._inflight.values() if not f.timed_out]
        return max(0.0, min([cap, *pending]))
