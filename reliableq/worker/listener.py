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
from django.db import connection

from ..services import CHANNEL

logger = logging.getLogger("reliableq.worker")

# Django-only keys of DATABASES[...]["OPTIONS"] that libpq would reject.
_NOT_LIBPQ = {"pool", "server_side_binding", "isolation_level", "assume_role", "cursor_factory", "context"}


def conninfo(settings_dict: dict[str, Any]) -> str:
    options = {k: v for k, v in (settings_dict.get("OPTIONS") or {}).items() if k not in _NOT_LIBPQ}
    params = {
        "dbname": settings_dict.get("NAME"),
        "user": settings_dict.get("USER"),
        "password": settings_dict.get("PASSWORD"),
        "host": settings_dict.get("HOST"),
        "port": settings_dict.get("PORT"),
        "application_name": options.pop("application_name", "reliableq-listener"),
        **options,
    }
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in params.items() if v not in (None, "")})


class Listener(threading.Thread):
    def __init__(self, *, queues: Collection[str], wake: Callable[[], None]) -> None:
        super().__init__(name="reliableq-listener", daemon=True)
        self.queues = set(queues)
        self._wake = wake
        self._halt = threading.Event()
        self._conninfo = conninfo(connection.settings_dict)
        self.notified = 0

    def run(self) -> None:
        pause = 0.5
        while not self._halt.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    pause = 0.5
                    while not self._halt.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if note.payload in self.queues:
                                self.notified += 1
                                self._wake()
            except psycopg.Error as exc:
                logger.warning("listener lost its connection, polling only until it is back: %s", exc)
                self._halt.wait(pause)
                pause = min(pause * 2, 30.0)

    def stop(self) -> None:
        self._halt.set()
