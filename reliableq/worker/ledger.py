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
        # Keyed by the UUIDs' ints: an int hashes in C, a UUID in Python, and each job is looked up
        # several times on its way through.
        self._inflight: dict[int, InFlight] = {}  # lease token -> attempt
        self._held: dict[int, tuple[uuid.UUID, uuid.UUID]] = {}  # job id -> (job id, lease token), renewed
        self._progress: dict[uuid.UUID, tuple[uuid.UUID, dict[str, Any]]] = {}  # token -> (job id, latest)
        # Lease tokens (ints) of attempts that ever reported progress: empty for most jobs, so that the
        # finish looks for a report only where there is one.
        self.progressed: set[int] = set()
        self._lock = threading.Lock()

    def add(self, jobs: list[ClaimedJob], deadlines: list[float]) -> None:
        """A claim's attempts, each with its deadline (one lock for the batch, not one per job)."""
        inflight, sink = self._inflight, self.report_progress
        for job, deadline in zip(jobs, deadlines, strict=True):
            inflight[job.lease_token.int] = InFlight(job=job, deadline=deadline)
            object.__setattr__(job, "_sink", sink)
        with self._lock:
            for job in jobs:
                self._held[job.id.int] = (job.id, job.lease_token)

    def settle(self, ends: list[tuple[uuid.UUID, uuid.UUID, bool]]) -> list[InFlight | None]:
        """These (job id, lease token, frees its slot) ends are written: stop renewing their leases and,
        for those that free a slot, forget the attempt. Each attempt, or None where it was unknown."""
        inflight = self._inflight
        flights = [inflight.pop(token.int, None) if frees else inflight.get(token.int) for _, token, frees in ends]
        with self._lock:
            for job_id, token, _ in ends:
                self._unhold(job_id, token)
            if self.progressed:
                for _, token, frees in ends:
                    if frees:
                        self.progressed.discard(token.int)
        return flights

    def report_progress(self, job: ClaimedJob, value: dict[str, Any]) -> None:
        """job.progress(), from any thread: the latest value waits for the heartbeat's next write."""
        with self._lock:
            self._progress[job.lease_token] = (job.id, value)
            self.progressed.add(job.lease_token.int)

    def take_progress(self) -> list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]:
        """The reports since the last call, as (job id, lease token, value), for the heartbeat to write."""
        with self._lock:
            taken, self._progress = self._progress, {}
        return [(job_id, token, value) for token, (job_id, value) in taken.items()]

    def get(self, token: uuid.UUID) -> InFlight | None:
        return self._inflight.get(token.int)

    def tokens(self) -> list[uuid.UUID]:
        return [flight.job.lease_token for flight in self._inflight.values()]

    def __len__(self) -> int:
        return len(self._inflight)

    def held(self) -> dict[uuid.UUID, uuid.UUID]:
        """A copy of the leases to renew (called from the heartbeat's thread)."""
        with self._lock:
            return dict(self._held.values())

    def drop(self, job_id: uuid.UUID, token: uuid.UUID) -> None:
        """Stop renewing this lease (its end is written, or another owner has the job)."""
        with self._lock:
            self._unhold(job_id, token)

    def _unhold(self, job_id: uuid.UUID, token: uuid.UUID) -> None:
        """Forget the lease if it is still this token's (the job may hold a newer one); under the lock."""
        lease = self._held.get(job_id.int)
        # The token claimed is the object the finish carries: `is` first, sparing UUID.__eq__ (Python).
        if lease is not None and (lease[1] is token or lease[1] == token):
            del self._held[job_id.int]

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
