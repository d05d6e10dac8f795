"""LISTEN for enqueue notifications so that an idle worker claims at once instead of at its next poll.

Polling stays the safety net: a notification can be lost (a reconnect misses some), and then the
job waits at most one POLL_SECONDS. A transaction pooler (PgBouncer in transaction mode) loses
them all, silently: LISTEN lands on a server connection the pooler hands to someone else. So on
every (re)connect the listener sends itself a probe through the queue's own database alias, the
way enqueue's NOTIFY travels; if the probe does not arrive it says so in plain words and stops,
leaving the worker to poll.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Collection
from typing import Any

import psycopg

from ..outage import unavailable
from ..queue.listening import aliases, connect_kwargs, listening, send_probe
from .reconnect import Outage, Retry

logger = logging.getLogger("reliableq.worker")

PROBE_PREFIX = "reliableq-probe:"  # + a random id: it names no queue anyone listens to
PROBE_SECONDS = 3.0


class Listener(threading.Thread):
    def __init__(self, *, queues: Collection[str], wake: Callable[[], None], outage: Outage | None = None) -> None:
        super().__init__(name="reliableq-listener", daemon=True)
        self.queues = set(queues)
        self._wake = wake
        self._halt = threading.Event()
        notify_alias, listen_alias = aliases()
        self.listen_alias = listen_alias
        self._listen = connect_kwargs(listen_alias, "reliableq-listener")
        self._notify = connect_kwargs(notify_alias, "reliableq-listener-probe")
        self.notified = 0
        self.hears: bool | None = None  # None until the first probe; False: deaf, polling only
        self.probed = threading.Event()
        self._retry = Retry("listener", outage or Outage(""), base=0.5)

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                with listening(self._listen) as conn:
                    self._retry.succeeded()  # connected to a server that takes LISTEN: not a standby
                    self.hears = self._probe(conn)
                    self.probed.set()
                    if not self.hears:
                        logger.warning(
                            "LISTEN on database alias %r does not hear a NOTIFY sent through %r: a transaction "
                            "pooler (PgBouncer in transaction mode) is probably between them. This worker falls "
                            "back to polling every POLL_SECONDS; set RELIABLEQ['LISTEN_DATABASE'] to an alias "
                            "with a direct connection to PostgreSQL for instant wake-ups.",
                            self.listen_alias,
                            aliases()[0],
                        )
                        return
                    logger.info(
                        "listening for enqueue notifications on database alias %r (probe heard)", self.listen_alias
                    )
                    self._serve(conn)
            except psycopg.Error as exc:
                pause = self._retry.failed(exc)
                if not unavailable(exc):  # an outage is the worker's Outage's to say, once
                    logger.warning("listener lost its connection, polling only; reconnecting in %.1fs: %s", pause, exc)
                self._halt.wait(pause)

    def _probe(self, conn: psycopg.Connection[Any]) -> bool:
        """Send a NOTIFY the way enqueue does, and wait for it on this LISTEN connection."""
        probe = PROBE_PREFIX + uuid.uuid4().hex
        send_probe(self._notify, probe)
        for note in conn.notifies(timeout=PROBE_SECONDS, stop_after=None):
            if note.payload == probe:
                return True
            self._deliver(note.payload)
        return False

    def _serve(self, conn: psycopg.Connection[Any]) -> None:
        while not self._halt.is_set():
            for note in conn.notifies(timeout=1.0):
                self._deliver(note.payload)

    def _deliver(self, payload: str) -> None:
        if payload in self.queues:
            self.notified += 1
            self._wake()

    def stop(self) -> None:
        self._halt.set()
