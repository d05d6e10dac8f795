"""Renew every lease the process holds, in one statement per interval."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, InterfaceError

from .. import outage as outages
from .reconnect import Outage, Retry
from .store import DatabaseStore, Store

logger = logging.getLogger("reliableq.worker")
PROGRESS_SECONDS = 1.0


class Heartbeat(threading.Thread):
    def __init__(
        self,
        *,
        held: Callable[[], dict[uuid.UUID, uuid.UUID]],
        on_lost: Callable[[list[tuple[uuid.UUID, uuid.UUID]]], None],
        lease_seconds: float,
        on_cancel: Callable[[list[uuid.UUID]], None] | None = None,
        store: Store | None = None,
        progress: Callable[[], list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]] | None = None,
        worker_id: str = "",
        busy: Callable[[], int] | None = None,
        start: dict[str, Any] | None = None,
        outage: Outage | None = None,
    ) -> None:
        super().__init__(name="reliableq-heartbeat", daemon=True)
        self._store: Store = store if store is not None else DatabaseStore()
        self._held = held
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / 3.0
        self._progress = progress
        self._worker_id = worker_id
        self._busy = busy
        self._start = start  # this worker's row, made again if it is missing (its start went unrecorded)
        self._halt = threading.Event()
        self._retry = Retry("heartbeat", outage or Outage(worker_id), base=min(0.5, self.interval))

    def run(self) -> None:
        # Renew every third of the lease; in between, every PROGRESS_SECONDS, write the handlers'
        # latest progress (at most one write a second per job, whatever they report). While the
        # database is away, beat again after the reconnect pause instead of a whole interval: the
        # leases must be renewed as soon as it is back, before they run out.
        next_beat = time.monotonic() + self.interval
        while not self._halt.wait(max(0.0, min(PROGRESS_SECONDS, next_beat - time.monotonic()))):
            if time.monotonic() >= next_beat:
                pause = self.beat()
                next_beat = time.monotonic() + (self.interval if pause is None else min(pause, self.interval))
            self.write_progress()
        self._store.reset()

    def _failed(self, exc: BaseException, message: str, *args: Any) -> float:
        """Drop the connection; say what failed unless the database is away (the Outage says that once)."""
        pause = self._retry.failed(exc)
        if not outages.unavailable(exc):
            logger.warning(message + ": %s", *args, exc)
        self._store.reset()
        return pause

    def write_progress(self) -> None:
        reports = self._progress() if self._progress is not None else []
        if not reports:
            return
        if self._retry.stale():  # an outage began: this connection may be to the old primary
            self._store.reset()
        try:
            self._store.record_progress(reports)
        except (DatabaseError, InterfaceError) as exc:
            self._failed(exc, "could not record the progress of %s job(s)", len(reports))
            return
        self._retry.succeeded()

    def beat(self) -> float | None:
        """Renew the leases held; None, or after a database error the pause before the next try."""
        if self._retry.stale():  # an outage began: this connection may be to the old primary
            self._store.reset()
        if self._worker_id and self._busy is not None:
            try:  # the workers panel's row: alive, this busy (one statement a beat)
                if not self._store.worker_seen(self._worker_id, busy=self._busy()) and self._start:
                    self._store.worker_seen(self._worker_id, busy=self._busy(), start=self._start)
            except (DatabaseError, InterfaceError) as exc:
                pause = self._failed(exc, "could not record that worker %s is alive", self._worker_id)
                if outages.unavailable(exc):
                    return pause  # the renewal would fail the same way
            else:
                self._retry.succeeded()
        held = self._held()
        if not held:
            return None
        try:
            renewed = self._store.renew(held.items(), lease_seconds=self.lease_seconds)
        except (DatabaseError, InterfaceError) as exc:
            # The lease runs on; the next beat tries again on a fresh connection.
            return self._failed(exc, "heartbeat failed, %s lease(s) not renewed", len(held))
        self._retry.succeeded()
        cancels = [job_id for job_id, asked in renewed.items() if asked]
        if cancels and self._on_cancel is not None:
            self._on_cancel(cancels)
        now_held = self._held()
        # Not renewed and still held under the same token: a finish may have raced this beat,
        # so ask the attempts which of these were really taken by another owner.
        gone = [
            (job_id, token) for job_id, token in held.items() if job_id not in renewed and now_held.get(job_id) == token
        ]
        if not gone:
            return None
        try:
            lost = self._store.mark_lost(gone, reason="lease lost: found by heartbeat, another owner has the job")
        except (DatabaseError, InterfaceError) as exc:
            return self._failed(exc, "could not check %s unrenewed lease(s)", len(gone))
        taken = [(job_id, token) for job_id, token in gone if job_id in lost]
        if taken:
            self._on_lost(taken)
        return None

    def stop(self) -> None:
        self._halt.set()
