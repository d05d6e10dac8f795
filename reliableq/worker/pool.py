"""A fixed pool of daemon threads that run attempts and report back through a callback."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from ..leases import ClaimedJob

logger = logging.getLogger("reliableq.worker")


class Pool:
    """`size` threads; a thread stuck in a handler keeps its slot until the handler returns.

    Daemon threads, so that a handler that never returns cannot hold the process open
    once the worker has decided to exit. Each thread keeps its own database connection.
    """

    def __init__(self, size: int, run: Callable[[ClaimedJob], Any], report: Callable[[Any], None]) -> None:
        self.size = size
        self._run = run
        self._report = report
        self._work: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        self._busy = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._serve, name=f"reliableq-handler-{i}", daemon=True) for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def busy(self) -> int:
        with self._lock:
            return self._busy

    @property
    def free(self) -> int:
        return self.size - self.busy

    def submit(self, job: ClaimedJob) -> None:
        with self._lock:
            if self._busy >= self.size:
                raise RuntimeError("The pool has no free slot; claims must be sized to free slots.")
            self._busy += 1
        self._work.put(job)

    def release(self) -> None:
        """Free a slot: the loop calls this once the attempt's end is written, not before.

        Freeing only after the finalize commits keeps every attempt's [started_at, finished_at]
        interval inside the time its slot was held, so in-flight counts read from attempt
        timestamps never exceed the pool size.
        """
        with self._lock:
            self._busy -= 1

    def _serve(self) -> None:
        while True:
            job = self._work.get()
            if job is None:
                return
            try:
                outcome: Any = self._run(job)
            except BaseException as exc:  # never lose a slot or a report to a surprise
                logger.exception("job=%s attempt=%s executor crashed", job.id, job.attempt)
                outcome = (job, exc)
            finally:
                _drop_broken_connections()
            self._report(outcome)

    def close(self) -> None:
        for _ in self._threads:
            self._work.put(None)
        connections.close_all()


def _drop_broken_connections() -> None:
    """Close this thread's connections that a handler left unusable; keep healthy ones open.

    (close_old_connections() would also close healthy ones when CONN_MAX_AGE is 0, and
    reconnecting for every job is the slowest thing a handler thread could do.)
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred and not conn.is_usable():
            conn.close()
