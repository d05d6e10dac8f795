"""The worker's periodic duties besides claiming: taking back expired leases and scheduling cron slots.

Each runs at most once per interval in this process. (The storage issue's elected maintenance
leader will run them once for the whole fleet; this is the one place that decides when.)
"""

from __future__ import annotations

from .store import Store


class Maintenance:
    def __init__(self, store: Store, *, rescue_seconds: float, schedule_seconds: float, has_crons: bool) -> None:
        self._store = store
        self._rescue_seconds = rescue_seconds
        self._schedule_seconds = schedule_seconds
        self._has_crons = has_crons
        self._next_rescue = 0.0
        self._next_schedule = 0.0

    def rescue_due(self, now: float) -> bool:
        """Whether the next claim should also take back expired leases.

        At most once per interval (and on every idle poll): recovery still takes at most the
        lease plus one interval, and a busy worker's claims stay single statements.
        """
        return now >= self._next_rescue

    def rescued(self, now: float) -> None:
        self._next_rescue = now + self._rescue_seconds

    def tick(self, now: float) -> None:
        """Every schedule interval, make sure each cron kind's next slot has its job."""
        if not self._has_crons or now < self._next_schedule:
            return
        self._next_schedule = now + self._schedule_seconds
        self._store.schedule_cron()
