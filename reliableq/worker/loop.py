"""The worker: wires a producer, a pool of handler threads, a completer, a heartbeat, a listener and
the maintenance duties together, and drains on a signal.

The loop holds no SQL: every database call goes through a Store (reliableq.worker.store).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import queue
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import DatabaseError, InterfaceError

from .. import outage, registry
from ..models import Outcome
from ..sanitize import describe, traceback_of
from . import executor
from .alive import AliveFile
from .completer import Completer, Writer, Written
from .heartbeat import Heartbeat
from .ledger import Ledger
from .listener import Listener
from .maintenance import Maintenance
from .pool import Pool
from .producer import Producer
from .reconnect import Outage, Retry
from .store import DatabaseStore, Store

logger = logging.getLogger("reliableq.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 8
    lease_seconds: float = 30.0
    grace_seconds: float = 30.0
    poll_seconds: float = 1.0
    worker_id: str = field(default_factory=default_worker_id)
    burst: bool = False
    listen: bool = True  # LISTEN for enqueue notifications (polling stays the safety net)
    schedule_seconds: float = 5.0  # how often the maintenance leader looks for new and changed schedules
    retention_seconds: float = 60.0  # how often the maintenance leader deletes a batch of old jobs
    # When a handler that ran shorter than linger_seconds reports, keep collecting the others'
    # results while they arrive less than linger_gap_seconds apart (for linger_seconds at most):
    # short jobs claimed together finish together, and are then finalized by one statement and
    # their slots refilled by one claim. Longer handlers (I/O-bound ones) never wait for this.
    linger_seconds: float = 0.002
    linger_gap_seconds: float = 0.0005
    health_file: Path | None = None  # touched after every pass without a database error (liveness probes)


_WAKE = object()  # a signal or a notification arrived
STUCK_EXIT = 3  # runworker's exit status once --concurrency handler threads are stuck
SUMMARY_SECONDS = 60.0  # how often the worker logs what it finished, at INFO (each job: DEBUG)


class Summary:
    """Every SUMMARY_SECONDS, one INFO line of what the worker finished since the last one."""

    def __init__(self, completer: Completer, pool: Pool, worker_id: str) -> None:
        self._completer = completer
        self._pool = pool
        self._worker_id = worker_id
        self._next = time.monotonic() + SUMMARY_SECONDS
        self._seen: dict[str, int] = {}

    def tick(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + SUMMARY_SECONDS
        ended = dict(self._completer.ended)
        since = {status: n - self._seen.get(status, 0) for status, n in ended.items()}
        self._seen = ended
        total = sum(since.values())
        if not total and not self._pool.busy:
            return
        parts = ", ".join(f"{n} {status.lower()}" for status, n in sorted(since.items()) if n)
        logger.info(
            "worker %s: %s attempt(s) ended in the last %.0fs (%s); %s in flight",
            self._worker_id,
            total,
            SUMMARY_SECONDS,
            parts or "none",
            self._pool.busy,
        )


GC_YOUNG = 10_000


def freeze_startup_objects() -> None:
    """Move what the process holds once it has started (Django, the handlers, the worker) out of the
    garbage collector's sight, as a long-lived server should: each collection of the young objects
    a job makes then no longer walks them, about 1% of a no-op job's instructions."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


class Worker:
    _pool: Pool

    def __init__(self, config: WorkerConfig, *, store: Store | None = None) -> None:
        self.config = config
        self.store: Store = store if store is not None else DatabaseStore()
        self.ledger = Ledger()
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()  # reentrant: safe from a signal handler
        self._short_result = False  # a handler shorter than linger_seconds reported since the last write
        self._fresh = True  # the next claim follows a wake, a poll or the start, not finishes alone
        self._stopping = False
        self._stop_deadline = 0.0
        self._exit_code = 0  # what run() returns once drained (STUCK_EXIT after stuck handlers)
        self._stop_signal = ""  # the signal that asked to stop, until the loop has said what it drains
        self._alive = AliveFile(config.health_file)
        self.outage = Outage(config.worker_id)  # which parts wait for the database, shared by them all
        self._signals = 0
        self.producer: Producer | None = None
        self.completer: Completer | None = None

    @property
    def claimed(self) -> int:
        return self.producer.claimed if self.producer else 0

    @property
    def finished(self) -> int:
        return self.completer.finished if self.completer else 0

    # -- signals --------------------------------------------------------------------------

    def request_stop(self, signum: int | None = None) -> None:
        """Stop claiming; finish what is running within the grace period. A second request exits at once."""
        self._signals += 1
        if self._signals > 1:
            logger.warning("second signal: exiting now, %s lease(s) left to expire", len(self.ledger.held()))
            os._exit(1)
        # Said by the loop at its next pass, not here: a signal handler must not take the logging locks.
        self._stop_signal = signal.Signals(signum).name if signum else "a stop request"
        self._begin_stop()

    def _begin_stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self._stop_deadline = time.monotonic() + self.config.grace_seconds
        self._events.put(_WAKE)

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda s, f: self.request_stop(s))

    def _lost(self, lost: list[tuple[Any, Any]]) -> None:
        """The heartbeat found these leases taken by another owner (called from its thread)."""
        for job_id, token in lost:
            flight = self.ledger.get(token)
            attempt = flight.job.attempt if flight else "?"
            logger.warning("job=%s attempt=%s token=%s lease lost: another owner has the job", job_id, attempt, token)
            self.ledger.drop(job_id, token)

    def _cancel_requested(self, job_ids: list[Any]) -> None:
        """The heartbeat's renewal found cancel requests for these jobs (called from its thread)."""
        held = self.ledger.held()
        for job_id in job_ids:
            flight = self.ledger.get(held[job_id]) if job_id in held else None
            if flight is not None and not flight.job.cancel_requested:
                logger.info("job=%s attempt=%s cancel requested", job_id, flight.job.attempt)
                flight.job.cancel.set()

    # -- the loop -------------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> int:
        """Work until stopped (or, with burst, until the queues are idle). Returns an exit code."""
        c = self.config
        if install_signals:
            self._install_signals()
        pool = Pool(c.concurrency, self._events.put)
        self.producer = Producer(
            self.store,
            self.ledger,
            pool,
            worker_id=c.worker_id,
            queues=c.queues,
            lease_seconds=c.lease_seconds,
            limits=registry.limits(),
        )
        writer = Writer(self.store, self._events.put, stale=self.outage.watch())
        writer.start()
        self.completer = Completer(self.store, self.ledger, pool, writer)
        maintenance = Maintenance(
            self.store,
            worker_id=c.worker_id,
            queues=c.queues,
            lease_seconds=c.lease_seconds,
            rescue_seconds=c.poll_seconds,
            schedule_seconds=c.schedule_seconds,
            retention_seconds=c.retention_seconds,
            cascade=writer.cascade,
        )
        heartbeat = Heartbeat(
            store=self.store,
            held=self.ledger.held,
            on_lost=self._lost,
            on_cancel=self._cancel_requested,
            lease_seconds=c.lease_seconds,
            progress=self.ledger.take_progress,
            worker_id=c.worker_id,
            busy=lambda: pool.busy,
            start=self._start_row(),
            outage=self.outage,
        )
        self._announce_start()
        heartbeat.start()
        listener = (
            Listener(queues=c.queues, wake=lambda: self._events.put(_WAKE), outage=self.outage) if c.listen else None
        )
        if listener is not None:
            listener.start()
        logger.info(
            "worker %s started: queues=%s concurrency=%s lease=%ss grace=%ss%s",
            c.worker_id,
            ",".join(c.queues),
            c.concurrency,
            c.lease_seconds,
            c.grace_seconds,
            " burst" if c.burst else "",
        )
        try:
            return self._loop(pool, maintenance)
        finally:
            try:
                maintenance.resign()
            except (DatabaseError, InterfaceError) as exc:  # the lease then runs out on its own
                logger.warning("could not resign the maintenance lease: %s", exc)
            heartbeat.stop()
            if listener is not None:
                listener.stop()
            writer.stop()
            pool.close()
            try:
                self.store.worker_stopped(c.worker_id)
            except (DatabaseError, InterfaceError) as exc:  # its row goes stale and reads as gone
                logger.warning("could not record that worker %s stopped: %s", c.worker_id, exc)
            self.store.reset()

    def _start_row(self) -> dict[str, Any]:
        c = self.config
        return {
            "queues": c.queues,
            "concurrency": c.concurrency,
            "isolation": registry.isolation(),  # what it runs, not the default (a handler may choose)
            "lease_seconds": c.lease_seconds,
        }

    def _announce_start(self) -> None:
        """The worker's row in the workers panel (a database that does not answer yet: the heartbeat's
        beats record it later, once it does)."""
        c = self.config
        try:
            self.store.worker_seen(c.worker_id, busy=0, start=self._start_row())
        except (DatabaseError, InterfaceError) as exc:
            logger.warning("could not record worker %s in the workers panel: %s", c.worker_id, exc)
            self.store.reset()

    def _loop(self, pool: Pool, maintenance: Maintenance) -> int:
        c = self.config
        assert self.completer is not None
        self._pool = pool
        alive = self._alive
        retry = Retry("loop", self.outage, base=c.poll_seconds)
        summary = Summary(self.completer, pool, c.worker_id)
        while True:
            try:
                if retry.stale():  # an outage began: this thread's connection may be to the old primary
                    self.store.reset()
                idle = self._step(pool, maintenance)
                if retry.failures and self.store.connected():  # a pass that reached the database
                    retry.succeeded()
                now = time.monotonic()
                alive.touch(now, self.outage.state())
                summary.tick(now)
            except (DatabaseError, InterfaceError) as exc:
                pause = retry.failed(exc)
                if not outage.unavailable(exc):  # an outage is the Outage's to say, once
                    logger.warning("database error, retrying in %.1fs: %s", pause, exc)
                self.store.reset()
                if outage.unavailable(exc):
                    alive.touch(time.monotonic(), self.outage.state())  # waiting for the database, not stuck
                if self._stopping:  # a stop asked while the database is away still ends with the grace period
                    left = self._stop_deadline - time.monotonic()
                    if left <= 0:
                        logger.warning(
                            "worker %s grace period over with the database unavailable: %s unfinished lease(s) "
                            "and %s unwritten end(s) left to expire",
                            c.worker_id,
                            len(self.ledger.held()),
                            self.completer.slots_to_free(),
                        )
                        return self._exit_code
                    pause = min(pause, left)
                self._wait(pause)
                continue
            busy = len(self.ledger) > 0 or self.completer.pending
            if self._stop_signal:
                logger.warning(
                    "worker %s: %s: no more claims; draining %s running job(s) for up to %gs. A second signal "
                    "abandons them now (their leases expire, and another worker takes them back).",
                    c.worker_id,
                    self._stop_signal,
                    len(self.ledger),
                    c.grace_seconds,
                )
                self._stop_signal = ""
            if self._stopping:
                if not busy:
                    logger.info("worker %s drained, exiting", c.worker_id)
                    return self._exit_code
                if time.monotonic() >= self._stop_deadline:
                    logger.warning(
                        "worker %s grace period over: %s unfinished lease(s) left to expire",
                        c.worker_id,
                        len(self.ledger.held()),
                    )
                    return self._exit_code
                self._wait(min(0.1, max(0.0, self._stop_deadline - time.monotonic())))
                continue
            if c.burst and idle and not busy and not self.store.has_work(c.queues):
                logger.info("worker %s: burst done, nothing due or running", c.worker_id)
                return 0
            if idle or pool.free <= 0:
                # Nothing to claim, or no slot to claim into: block until a handler reports
                # (or the next handler deadline passes) instead of spinning through _step.
                self._wait(self.ledger.until_next_deadline(time.monotonic(), c.poll_seconds))

    def _step(self, pool: Pool, maintenance: Maintenance) -> bool:
        """One pass: collect ends, expire stuck handlers, write, claim into free slots. True when idle."""
        assert self.producer is not None and self.completer is not None
        self._collect()
        self._linger(pool)
        self._expire_timeouts()
        self.completer.write()
        self._short_result = False
        if self._stopping:
            return False
        maintenance.tick(time.monotonic())
        if pool.free <= 0:
            return False  # a completion will wake us
        # Expired leases are taken back by the maintenance leader, once for the fleet.
        refill, self._fresh = not self._fresh, False
        idle = self.producer.produce(rescue=False, refill=refill)
        return idle

    def _wait(self, seconds: float) -> None:
        """Sleep until an event arrives or `seconds` pass; keep the event for _collect."""
        try:
            event = self._events.get(timeout=max(0.0, seconds))
        except queue.Empty:
            self._fresh = True  # a poll: the next claim asks every kind
            return
        self._events.put(event)

    def _collect(self) -> None:
        """Hand every reported end to the completer."""
        assert self.completer is not None
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if event is _WAKE:
                self._fresh = True  # a notification (or a signal): the next claim asks every kind
                continue
            if isinstance(event, Written):  # a batch of ends committed (or failed: raised here, retried later)
                self.completer.apply(event)
                continue
            if isinstance(event, tuple):  # the executor itself raised (SystemExit and the like)
                job, exc = event
                finish = executor.failure(job, outcome=Outcome.FAILED_TRANSIENT, error=describe(exc))
                self.completer.add(dataclasses.replace(finish, traceback=traceback_of(exc)), frees_slot=True)
                continue
            self.completer.add(event.finish, frees_slot=True, seconds=event.seconds)
            if event.seconds < self.config.linger_seconds:
                self._short_result = True

    def _linger(self, pool: Pool) -> None:
        """Collect the results of handlers finishing right after the first one (see linger_seconds)."""
        c = self.config
        assert self.completer is not None
        if not self._short_result or not self.completer.pending or self._stopping or c.linger_seconds <= 0:
            return
        deadline = time.monotonic() + c.linger_seconds
        while pool.busy > self.completer.slots_to_free():
            remaining = min(deadline - time.monotonic(), c.linger_gap_seconds)
            if remaining <= 0:
                return
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                return
            self._events.put(event)
            self._collect()

    def _expire_timeouts(self) -> None:
        assert self.completer is not None
        overdue = self.ledger.overdue(time.monotonic())
        for flight in overdue:
            job = flight.job
            seconds = executor.timeout_for(job.kind)
            finish = executor.failure(
                job, outcome=Outcome.TIMED_OUT, error=f"handler timed out after {seconds:g}s on worker {job.worker_id}"
            )
            # The slot is free once this end is written: a coroutine is cancelled, a child killed, and
            # a thread (which cannot be stopped) left to run on while a new one takes the slot.
            self._pool.abandon(job)
            self.completer.add(finish, frees_slot=True, seconds=seconds)
        if overdue:
            self._check_stuck()

    def _check_stuck(self) -> None:
        """Once --concurrency threads are stuck in handlers, stop claiming and exit for a fresh process."""
        stuck = self._pool.stuck()
        if len(stuck) < self.config.concurrency or self._exit_code:
            return
        logger.error(
            "worker %s: %s handler thread(s) stuck past their timeout (%s); a thread cannot be stopped, so this "
            "worker stops claiming and exits with status %s for its supervisor to start a fresh one",
            self.config.worker_id,
            len(stuck),
            ", ".join(f"job={job.id} kind={job.kind} attempt={job.attempt}" for job in stuck),
            STUCK_EXIT,
        )
        self._exit_code = STUCK_EXIT
        self._alive.fail()
        self._begin_stop()
