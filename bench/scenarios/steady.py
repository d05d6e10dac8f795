"""A steady offered load: a thread that enqueues no-op jobs at a fixed rate, for the scenarios that need one."""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable

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


def finished_by(began: float) -> Callable[[float], int]:
    """After a run has drained: C(t), the jobs whose finished_at is before t seconds from the start.

    Counting live undercounts: finished_at is the finishing transaction's start, so a job finished
    just before a count that commits just after it falls between two counts. Read afterwards, when
    every finish has committed, nothing is missed (tenths of a second; the table must still hold the
    rows, so not with retention on).
    """
    return _count_by("finished_at", began)


def created_by(began: float) -> Callable[[float], int]:
    """After a run: E(t), the jobs whose created_at (their INSERT's transaction start) is before t.

    Read on the database's clock, like finished_by, so that E(t) - C(t), the backlog, is never
    negative: a job's finish starts after its INSERT committed. (The enqueuer's own count, taken
    after each commit, ran behind the finishes read from finished_at: a backlog of -270 at 3,000/s.)
    """
    return _count_by("created_at", began)


def _count_by(column: str, began: float) -> Callable[[float], int]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT floor((extract(epoch FROM {column}) - %s) * 10)::bigint AS tenth, count(*) FROM reliableq_job"
            f" WHERE {column} >= to_timestamp(%s) GROUP BY tenth ORDER BY tenth",
            [began, began],
        )
        rows = cursor.fetchall()
    return counter(rows)


def counter(rows: list[tuple[int, int]]) -> Callable[[float], int]:
    """C(t) from (tenth of a second since the start, jobs counted in it), in order of the tenth.

    Within the tenth that holds t, the jobs are counted in proportion to the part of it before t:
    counting the whole tenth put up to a tenth of a second of jobs ahead of t, and leaving it out
    as far behind.
    """
    tenths = [t for t, _ in rows]
    cumulative = []
    total = 0
    for _, n in rows:
        total += n
        cumulative.append(total)

    def count(at: float) -> int:
        tenth = math.floor(at * 10)
        i = bisect.bisect_left(tenths, tenth)  # the tenths wholly before `at`
        before = cumulative[i - 1] if i else 0
        if i < len(tenths) and tenths[i] == tenth:
            return before + round((cumulative[i] - before) * (at * 10 - tenth))
        return before

    return count
