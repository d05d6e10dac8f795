"""The completer: collects how attempts ended and writes them in batches, each fenced by its lease token."""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, InterfaceError

from .. import signals
from ..models import JobStatus, Outcome
from ..queue import Finish, FinishResult
from .ledger import Ledger
from .pool import Pool
from .store import Store

logger = logging.getLogger("reliableq.worker")


@dataclass(frozen=True, slots=True)
class Written:
    """A batch of ends the writer thread has written (or failed to write: `error`)."""

    batch: list[tuple[Finish, bool]]
    result: FinishResult | None
    error: BaseException | None = None


class Writer(threading.Thread):
    """Writes batches of ends on a connection of its own while the loop claims on its connection.

    The claim and the finish are the two statements of every cycle; one after the other on one
    connection, the loop waited for each in turn while PostgreSQL had a core to spare. (With no slot
    free to claim into there is nothing to overlap, and Completer.write writes on the loop's thread.)
    Each batch's Written goes back through `post` (the loop's events), so the loop alone touches its
    ledger.
    """

    def __init__(self, store: Store, post: Callable[[Written], None], stale: Callable[[], bool] | None = None) -> None:
        super().__init__(name="reliableq-completer", daemon=True)
        self._store = store
        self._post = post
        self._stale = stale  # True once an outage began since the last batch: reconnect first
        self._batches: queue.SimpleQueue[list[tuple[Finish, bool]] | None] = queue.SimpleQueue()

    def write(self, batch: list[tuple[Finish, bool]]) -> None:
        self._batches.put(batch)

    def cascade(self) -> None:
        """Take up what a workflow member's end handed on (an empty batch asks for that alone)."""
        self._batches.put([])

    def run(self) -> None:
        cascading = False
        while True:
            # A long workflow's cancel goes on here, one short transaction at a time, only while no
            # batch of ends waits: the ends of other jobs never wait behind it for more than one.
            if cascading and self._batches.empty():
                cascading = self._cascade()
                continue
            batch = self._batches.get()
            if batch is None:
                self._store.reset()
                return
            cascading = cascading or not batch or hands_on(batch)
            if not batch:
                continue
            if self._stale is not None and self._stale():
                self._store.reset()
            try:
                written = Written(batch, self._store.finish([f for f, _ in batch]))
            except (DatabaseError, InterfaceError) as exc:
                self._store.reset()  # this thread's connection: the next batch opens a fresh one
                written = Written(batch, None, exc)
            self._post(written)

    def _cascade(self) -> bool:
        """One step of a handed-on cancel; whether there may be more."""
        try:
            return self._store.cascade() > 0
        except (DatabaseError, InterfaceError) as exc:
            self._store.reset()  # the maintenance leader takes it up at its next round
            logger.warning("could not go on cancelling a workflow's dependents: %s", exc)
            return False

    def stop(self) -> None:
        self._batches.put(None)
        self.join(timeout=5.0)


class Completer:
    """Collects how attempts ended and writes them in batches, one batch in flight at a time.

    Slots are freed, leases dropped and ends logged only once their batch has committed (apply(),
    on the loop's thread). Without a Writer (tests, tools), write() writes on the caller's thread.
    """

    def __init__(self, store: Store, ledger: Ledger, pool: Pool, writer: Writer | None = None) -> None:
        self._store = store
        self._ledger = ledger
        self._pool = pool
        self._writer = writer
        self._unwritten: list[tuple[Finish, bool]] = []  # (finish, frees a slot once written)
        self._writing: list[tuple[Finish, bool]] = []  # the batch the writer has now
        self.finished = 0
        self.ended: Counter[str] = Counter()  # written ends by the status they left the job in (the summary's)
        self._seconds: dict[uuid.UUID, float] = {}  # lease token -> the handler's run time, for job_finished

    def add(self, finish: Finish, *, frees_slot: bool, seconds: float = 0.0) -> None:
        progressed = self._ledger.progressed
        if progressed and finish.lease_token.int in progressed:
            flight = self._ledger.get(finish.lease_token)
            if flight is not None and flight.job.last_progress is not None:
                finish = dataclasses.replace(finish, progress=flight.job.last_progress)
        self._unwritten.append((finish, frees_slot))
        if seconds and signals.job_finished.receivers:  # the signal's field, kept only for a listener
            self._seconds[finish.lease_token] = seconds

    @property
    def pending(self) -> bool:
        return bool(self._unwritten or self._writing)

    def slots_to_free(self) -> int:
        """How many of the ends not yet committed will free a slot once they are."""
        return sum(1 for _, frees in self._unwritten + self._writing if frees)

    def write(self) -> None:
        """Start writing what is collected, one Finish per job per batch (a late result and its own
        timeout go in separate batches, so each is fenced on its own).

        With a slot free, the Writer writes while the caller claims. With none (or no Writer), the
        next claim waits for this commit anyway: the batch is written and applied on the caller's
        thread before this returns, sparing the hand-off to the Writer's thread and back."""
        if not self._unwritten or self._writing:
            return
        first: dict[int, tuple[Finish, bool]] = {}
        later: list[tuple[Finish, bool]] = []
        for item in self._unwritten:
            if first.setdefault(item[0].job_id.int, item) is not item:
                later.append(item)
        self._writing, self._unwritten = list(first.values()), later
        if self._writer is not None and self._pool.free > 0:
            self._writer.write(self._writing)
            return
        try:
            result = self._store.finish([f for f, _ in self._writing])
        except BaseException:
            self._unwritten, self._writing = self._writing + self._unwritten, []
            raise
        if self._writer is not None and hands_on(self._writing):
            self._writer.cascade()
        self.apply(Written(self._writing, result))

    def apply(self, written: Written) -> None:
        """The batch has committed (or failed: it is kept to be written again, and the error raised)."""
        self._writing = []
        if written.error is not None or written.result is None:
            self._unwritten = written.batch + self._unwritten
            raise written.error or RuntimeError("a batch came back without a result")
        result = written.result
        lost = set(result.lost)
        announce = bool(signals.job_finished.receivers) and signals.job_finished.has_listeners()
        ends: list[tuple[uuid.UUID, str, str]] | None = [] if signals.ended_hooks() else None
        debug = logger.isEnabledFor(logging.DEBUG)
        batch = written.batch
        flights = self._ledger.settle([(f.job_id, f.lease_token, frees) for f, frees in batch])
        self._pool.release(sum(frees for _, frees in batch))
        for (finish, frees), flight in zip(batch, flights, strict=True):
            attempt = flight.job.attempt if flight else "?"
            if lost and finish.job_id in lost:
                if not (flight and flight.timed_out and frees):
                    logger.warning("job=%s attempt=%s lease lost; result discarded", finish.job_id, attempt)
                continue
            cancelled = bool(result.cancelled) and finish.job_id in result.cancelled
            status = JobStatus.CANCELLED if cancelled else finish.status
            self.finished += 1
            self.ended[status] += 1
            if debug or status != JobStatus.SUCCEEDED:  # a success's line only when someone reads it
                _log(finish, attempt, flight.job.kind if flight else None)
            seconds = self._seconds.pop(finish.lease_token, 0.0) if self._seconds else 0.0
            if ends is not None and flight is not None:
                ends.append((finish.job_id, flight.job.kind, status))
            if announce and flight is not None:
                signals.send(
                    signals.job_finished,
                    job_id=finish.job_id,
                    kind=flight.job.kind,
                    status=str(status),
                    outcome=str(Outcome.CANCELLED if cancelled else finish.outcome),
                    attempt=flight.job.attempt,
                    seconds=seconds,
                )
        if ends:
            signals.send_ended(ends)


def hands_on(batch: list[tuple[Finish, bool]]) -> bool:
    """Whether a batch's ends may have handed a workflow's cancel on: a member that ended and did not
    succeed (a retry is not an end; a cancel request may turn one into a CANCELLED end)."""
    return any(f.workflow and f.status not in (JobStatus.SUCCEEDED, JobStatus.WAITING) for f, _ in batch)


def fields(job_id: Any, kind: Any, attempt: Any, token: Any, **more: Any) -> dict[str, Any]:
    """The log record's `extra`: what a JSON formatter (python-json-logger, structlog) emits as fields."""
    return {"job_id": str(job_id), "kind": kind, "attempt": attempt, "lease_token": str(token), **more}


def _log(finish: Finish, attempt: Any, kind: Any = None) -> None:
    if finish.status == JobStatus.SUCCEEDED:
        if logger.isEnabledFor(logging.DEBUG):  # a success's line, and its fields, only when someone reads them
            extra = fields(finish.job_id, kind, attempt, finish.lease_token, outcome=str(finish.outcome))
            logger.debug("job=%s attempt=%s succeeded", finish.job_id, attempt, extra=extra)
        return
    extra = fields(finish.job_id, kind, attempt, finish.lease_token, outcome=str(finish.outcome))
    trace = "\n" + finish.traceback.rstrip() if finish.traceback else ""
    if finish.outcome == Outcome.SNOOZED and finish.status in (JobStatus.PENDING, JobStatus.WAITING):
        logger.info("job=%s attempt=%s %s", finish.job_id, attempt, finish.error, extra=extra)  # a sleep, a wait
    elif finish.status == JobStatus.PENDING:
        logger.warning(
            "job=%s attempt=%s %s, retry in %.1fs: %s%s",
            finish.job_id,
            attempt,
            finish.outcome.lower(),
            finish.delay,
            finish.error,
            trace,
            extra=extra,
        )
    elif finish.status == JobStatus.CANCELLED:
        logger.info(
            "job=%s attempt=%s cancelled (%s): %s",
            finish.job_id,
            attempt,
            finish.outcome.lower(),
            finish.error,
            extra=extra,
        )
    else:
        logger.error(
            "job=%s attempt=%s dead (%s): %s%s",
            finish.job_id,
            attempt,
            finish.outcome.lower(),
            finish.error,
            trace,
            extra=extra,
        )
