"""How the worker's parts ride out a database that goes away: a restart, a failover, a read-only server.

Each part that talks to the database on a thread of its own keeps a Retry: the loop (its claims,
the maintenance duties, and the completer's writes, whose errors come back to it), the heartbeat
and the listener. When a call fails because the database is unavailable (reliableq.outage), the
part drops its connection, waits the Retry's next pause (capped exponential backoff with full
jitter, so that a fleet does not reconnect in step) and tries again on a new connection, which
libpq opens on whichever listed host now answers read-write. A read-only server is "not yet",
like a refused connection: nothing exits, and no job is finished on the strength of it.

The parts of one process share one Outage. The first part to fail says so in the log, once; the
last one back says the database is back, once, and after how long; in between, the health file
says `reconnecting since ...` and stays fresh, since the loop is turning and waiting for the
database, which a restart would not bring back sooner. Once an outage has begun, every part
(and the completer's writer) drops its connection before its next call, even one that has not
failed yet: it may be a connection to the old primary, which would fail later, after the
database is back, and start a second outage in the log.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

from .. import backoff, outage

logger = logging.getLogger("reliableq.worker")

RECONNECT_MAX_SECONDS = 5.0  # the longest pause between two attempts to reach a database that is away
ERROR_MAX_SECONDS = 30.0  # the longest pause after any other database error (each one is logged)
REMIND_SECONDS = 300.0  # a long outage is mentioned again this often


class Outage:
    """Which of a worker's parts cannot reach the database now, and since when."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._lock = threading.Lock()
        self._down: dict[str, str] = {}  # part -> its last error, on one line
        self._since = 0.0  # monotonic
        self._since_wall = ""
        self._first = ""  # the error the outage began with
        self._remind = 0.0
        self.outages = 0  # how many began: a part whose connection predates the last one drops it

    def watch(self) -> Callable[[], bool]:
        """A test for one thread: True once after each outage that began since it last said so."""
        seen = self.outages

        def stale() -> bool:
            nonlocal seen
            if self.outages == seen:
                return False
            seen = self.outages
            return True

        return stale

    @property
    def down(self) -> bool:
        return bool(self._down)

    def state(self) -> str | None:
        """What the health file says while a part is reconnecting; None when every part is connected."""
        with self._lock:
            if not self._down:
                return None
            return f"reconnecting since {self._since_wall} ({', '.join(sorted(self._down))}): {self._first}"

    def failed(self, part: str, exc: BaseException) -> None:
        text = outage.summary(exc)
        now = time.monotonic()
        with self._lock:
            began = not self._down
            self._down[part] = text
            if began:
                self.outages += 1
                self._since = now
                self._since_wall = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                self._first = text
                self._remind = now + REMIND_SECONDS
            remind = not began and now >= self._remind
            if remind:
                self._remind = now + REMIND_SECONDS
            since = now - self._since
        if began:
            logger.warning(
                "worker %s: the database is unavailable (%s: %s); reconnecting by itself, at least every %gs, "
                "until a server answers read-write. Running handlers go on; leases are renewed once it is back.",
                self.worker_id,
                part,
                text,
                RECONNECT_MAX_SECONDS,
            )
        elif remind:
            logger.warning(
                "worker %s: the database is still unavailable after %.0fs (%s: %s)", self.worker_id, since, part, text
            )
        else:
            logger.debug("worker %s: %s cannot reach the database yet: %s", self.worker_id, part, text)

    def recovered(self, part: str) -> None:
        if part not in self._down:  # the usual case, on every successful call: no lock
            return
        with self._lock:
            if self._down.pop(part, None) is None or self._down:
                return
            seconds = time.monotonic() - self._since
        logger.info("worker %s: the database is back after %.1fs; every part reconnected", self.worker_id, seconds)


class Retry:
    """One part's pauses while the database is away: capped exponential backoff with full jitter."""

    def __init__(self, part: str, outage_: Outage, *, base: float) -> None:
        self.part = part
        self.outage = outage_
        self.base = base
        self.failures = 0
        self.stale = outage_.watch()  # True once after an outage began: drop the connection first

    def failed(self, exc: BaseException) -> float:
        """Count a failure; an outage is the Outage's to report. Returns the pause before the next attempt."""
        self.failures += 1
        if outage.unavailable(exc):
            self.outage.failed(self.part, exc)
            maximum = RECONNECT_MAX_SECONDS
        else:
            maximum = ERROR_MAX_SECONDS
        return backoff.delay(self.failures, base=min(self.base, maximum), maximum=maximum)

    def succeeded(self) -> None:
        if self.failures:
            self.failures = 0
        self.outage.recovered(self.part)
