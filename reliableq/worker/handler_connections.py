"""The database connections a handler thread opened, and closing the ones a handler left broken.

Apart from the pool, so that the executor (a coroutine's thread) and a child process can drop
their broken connections without importing the pool that imports them.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db.backends.signals import connection_created

from .. import outage

_opened = threading.local()  # .connections: alias -> the wrapper this thread connected through


def _connected(sender: Any, connection: Any, **kwargs: Any) -> None:
    """connection_created, in the thread that connected: remember the wrapper for that thread."""
    known = getattr(_opened, "connections", None)
    if known is None:
        known = _opened.connections = {}
    known[connection.alias] = connection


connection_created.connect(_connected, dispatch_uid="reliableq.worker.pool")


def drop_broken_connections() -> None:
    """Close this thread's connections that a handler left unusable (or that a failed statement found
    on a read-only standby, where the next handler would fail the same way); keep healthy ones open.

    (close_old_connections() would also close healthy ones when CONN_MAX_AGE is 0, and
    reconnecting for every job is the slowest thing a handler thread could do.) Only the
    connections this thread has opened are looked at: asking Django for all of them, alias by
    alias through its per-thread storage, cost more than a no-op job's own run.
    """
    opened = getattr(_opened, "connections", None)
    if not opened:  # a handler that never touched a database: most no-op and I/O jobs
        return
    for conn in opened.values():
        if conn.connection is not None and conn.errors_occurred and (not conn.is_usable() or outage.on_standby(conn)):
            conn.close()
