"""The completer: collects how attempts ended and writes them in batches, each fenced by its lease token."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import Any

from .. import signals
from ..leases import Finish
from ..models import JobStatus, Outcome
from .ledger import Ledger
from .pool import Pool
from .store import Store

logger = logging.getLogger("reliableq.worker")


class Completer:
    def __init__(self, store: Store, ledger: Ledger, pool: Pool) -> None:
        self._store = store
        self._ledger = ledger
        self._pool = pool
        self._unwritten: list[tuple[Finish, bool]] = []  # (finish, frees a slot once written)
        self.finished = 0
        self.ended: Counter[str] = Counter()  # written ends by the status they left the job in (the summary's)
        self._seconds: dict[uuid.UUID, float] = {}  # lease token -> the handler's run time, for job_finished

    def add(self, finish: Finish, *, frees_slot: bool, seconds: float = 0.0) -> None:
        self._unwritten.append((finish, frees_slot))
        if seconds:
            self._seconds[finish.lease_token] = seconds

    @property
    def pending(self) -> bool:
        return bool(self._unwritten)

    def slots_to_free(self) -> int:
        """How many of the unwritten ends will free a slot (a timeout's end does not: its thread runs on)."""
        return sum(1 for _, frees in self._unwritten if frees)

    def write(self) -> None:
        """Write what is collected, one Finish per job per statement; free slots only after the commit.

        A late result and its own timeout go in separate batches, so each is fenced on its own.
        """
        if not self._unwritten:
            return
        first: dict[uuid.UUID, tuple[Finish, bool]] = {}
        later: list[tuple[Finish, bool]] = []
        for item in self._unwritten:
            if item[0].job_id in first:
                later.append(item)
            else:
                first[item[0].job_id] = item
        result = self._store.finish([f for f, _ in first.values()])
        self._unwritten = later
        lost = set(result.lost)
        announce = signals.job_finished.has_listeners()
        for finish, frees in first.values():
            flight = self._ledger.get(finish.lease_token)
            self._ledger.drop(finish.job_id, finish.lease_token)
            if frees:
                self._ledger.remove(finish.lease_token)
                self._pool.release()
            attempt = flight.job.attempt if flight else "?"
            if finish.job_id in lost:
                if not (flight and flight.timed_out and frees):
                    logger.warning("job=%s attempt=%s lease lost; result discarded", finish.job_id, attempt)
                continue
            status = JobStatus.CANCELLED if finish.job_id in result.cancelled else finish.status
            self.finished += 1
            self.ended[status] += 1
            _log(finish, attempt)
            seconds = self._seconds.pop(finish.lease_token, 0.0)
            if announce and flight is not None:
                signals.send(
                    signals.job_finished,
                    job_id=finish.job_id,
                    kind=flight.job.kind,
                    status=str(status),
                    outcome=str(Outcome.CANCELLED if finish.job_id in result.cancelled else finish.outcome),
                    attempt=flight.job.attempt,
                    seconds=seconds,
                )


def _log(finish: Finish, attempt: Any) -> None:
    if finish.status == JobStatus.SUCCEEDED:
        logger.debug("job=%s attempt=%s succeeded", finish.job_id, attempt)
    elif finish.status == JobStatus.PENDING:
        logger.warning(
            "job=%s attempt=%s %s, retry in %.1fs: %s%s",
            finish.job_id,
            attempt,
            finish.outcome.lower(),
            finish.delay,
            finish.error,
            "\n" + finish.traceback.rstrip() if finish.traceback else "",
        )
    elif finish.status == JobStatus.CANCELLED:
        logger.info(
            "job=%s attempt=%s cancelled (%s): %s", finish.job_id, attempt, finish.outcome.lower(), finish.error
        )
    else:
        logger.error(
            "job=%s attempt=%s dead (%s): %s%s",
            finish.job_id,
            attempt,
            finish.outcome.lower(),
            finish.error,
            "\n" + finish.traceback.rstrip() if finish.traceback else "",
        )
