"""LISTEN for enqueue notifications so that an idle worker claims at once instead of at its next poll.

Polling stays the safety net: a notification can be lost (a pooler in transaction mode drops
them, a reconnect misses some), and then the job waits at most one POLL_SECONDS.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections

from .. import backoff
from ..services import CHANNEL

logger = logging.getLogger("reliableq.worker")

def connect_kwargs(alias: str = DEFAULT_DB_ALIAS) -> dict[str, Any]:
    """What Django itself would pass to psycopg.connect for this alias (its OPTIONS, its adapters)."""
    params: dict[str, Any] = connections[alias].get_connection_params()
    params.setdefault("application_name", "reliableq-listener")
    return params


class Listener(threading.Thread):
    def __init__(self, *, queues: Collection[str], wake: Callable[[], None]) -> None:
        super().__init__(name="reliableq-listener", daemon=True)
        self.queues = set(queues)
        self._wake = wake
        self._halt = threading.Event()
        self._params = connect_kwargs()
        self.notified = 0

    def run(self) -> None:
        failures = 0
        while not self._halt.is_set():
            try:
                with psycopg.connect(**self._params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    failures = 0
                    while not self._halt.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if note.payload in self.queues:
                                self.notified += 1
                                self._wake()
            except psycopg.Error as exc:
                failures += 1
                pause = backoff.delay(failures, base=0.5, maximum=30.0)
                logger.warning("listener lost its connection, polling only; reconnecting in %.1fs: %s", pause, exc)
                self._halt.wait(pause)

    def stop(self) -> None:
        self._halt.set()
