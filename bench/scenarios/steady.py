"""A steady offered load: a thread that enqueues no-op jobs at a fixed rate, for the scenarios that need one."""

from __future__ import annotations

import threading
import time

from django.db import connection, transaction

from ..systems import QUEUE

TICK = 0.02  # the enqueuer inserts every 20 ms what the rate owes by then


class Enqueuer:
    """A thread that inserts, every TICK, the jobs the rate owes since the start (one INSERT, one commit)."""

    def __init__(self, rate: float, seconds: float) -> None:
        self.rate = rate
        self.seconds = seconds
        self.count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, began: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(began,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError("the enqueuer failed") from self.error

    def _run(self, began: float) -> None:
        from reliableq import services

        try:
            while not self._stop.is_set():
                elapsed = time.time() - began
                if elapsed >= self.seconds:
                    break
                owed = int(self.rate * elapsed) - self.count
                if owed > 0:
                    with transaction.atomic():
                        services.enqueue_many("bench.noop", [{}] * owed, queue=QUEUE)
                    self.count += owed
                self._stop.wait(TICK)
        except BaseException as error:  # reported by stop()
            self.error = error
        finally:
            connection.close()
