"""The claim loop: claim into free slots, write results, time out stuck handlers, drain on a signal.

The loop holds no SQL: every database write goes through reliableq.leases.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, InterfaceError, connection

from .. import backoff, leases, registry, scheduler, services
from ..leases import ClaimedJob, Finish
from ..models import JobStatus, Outcome
from ..sanitize import describe
from . import executor
from .heartbeat import Heartbeat
from .listener import Listener
from .pool import Pool

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
    schedule_seconds: float = 5.0  # how often to make sure the next cron slots have their jobs
    # When a handler that ran shorter than linger_seconds reports, keep collecting the others'
    # results while they arrive less than linger_gap_seconds apart (for linger_seconds at most):
    # short jobs claimed together finish together, and are then finalized by one statement and
    # their slots refilled by one claim. Longer handlers (I/O-bound ones) never wait for this.
    linger_seconds: float = 0.002
    linger_gap_seconds: float = 0.0005


@dataclass(slots=True)
class _InFlight:
    job: ClaimedJob
    deadline: float  # monotonic; past it the attempt is recorded TIMED_OUT
    timed_out: bool = False


_WAKE = object()  # a signal arrived


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()  # reentrant: safe from a signal handler
        self._inflight: dict[uuid.UUID, _InFlight] = {}  # lease token -> attempt in a thread
        self._held: dict[uuid.UUID, uuid.UUID] = {}  # job id -> lease token, renewed by the heartbeat
        self._held_lock = threading.Lock()
        self._unwritten: list[tuple[Finish, bool]] = []  # (finish, releases a slot once written)
        self._short_result = False  # a handler shorter than linger_seconds reported since the last write
        self._stopping = False
        self._claim_uncertain = False  # a claim failed: it may have committed anyway
        self._caps = registry.caps()  # kinds with a fleet-wide max_running
        self._crons = registry.crons()  # kinds with a schedule
        self._next_schedule = 0.0
        self._next_rescue = 0.0  # monotonic; claims in between skip the rescue of expired leases
        self._stop_deadline = 0.0
        self._signals = 0
        self.claimed = 0
        self.finished = 0

    # -- shared with the heartbeat thread -------------------------------------------------

    def held(self) -> dict[uuid.UUID, uuid.UUID]:
        with self._held_lock:
            return dict(self._held)

    def _hold(self, job: ClaimedJob) -> None:
        with self._held_lock:
            self._held[job.id] = job.lease_token

    def _drop(self, job_id: uuid.UUID, token: uuid.UUID) -> None:
        with self._held_lock:
            if self._held.get(job_id) == token:
                del self._held[job_id]

    def _lost(self, lost: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
        """The heartbeat found these leases taken by another owner (called from its thread)."""
        for job_id, token in lost:
            flight = self._inflight.get(token)
            attempt = flight.job.attempt if flight else "?"
            logger.warning("job=%s attempt=%s token=%s lease lost: another owner has the job", job_id, attempt, token)
            self._drop(job_id, token)

    # -- signals --------------------------------------------------------------------------

    def request_stop(self, signum: int | None = None) -> None:
        """Stop claiming; finish what is running within the grace period."""
        self._signals += 1
        if self._signals > 1:
            logger.warning("second signal: exiting now, %s lease(s) left to expire", len(self.held()))
            os._exit(1)
        self._stopping = True
        self._stop_deadline = time.monotonic() + self.config.grace_seconds
        self._events.put(_WAKE)

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda s, f: self.request_stop(s))

    # -- the loop -------------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> int:
        """Work until stopped (or, with burst, until the queues are idle). Returns an exit code."""
        c = self.config
        if install_signals:
            self._install_signals()
        pool = Pool(c.concurrency, executor.run_attempt, self._events.put)
        heartbeat = Heartbeat(held=self.held, on_lost=self._lost, lease_seconds=c.lease_seconds)
        heartbeat.start()
        listener = Listener(queues=c.queues, wake=lambda: self._events.put(_WAKE)) if c.listen else None
        if listener is not None:
            listener.start()
        logger.info(
            "worker %s started: queues=%s concurrency=%s lease=%ss grace=%ss%s",
            c.worker_id, ",".join(c.queues), c.concurrency, c.lease_seconds, c.grace_seconds,
            " burst" if c.burst else "",
        )
        failures = 0
        try:
            while True:
                try:
                    idle = self._step(pool)
                    failures = 0
                except (DatabaseError, InterfaceError) as exc:
                    failures += 1
                    # Jittered, so that a fleet does not reconnect in step after a database restart.
                    pause = backoff.delay(failures, base=c.poll_seconds, maximum=30.0)
                    logger.warning("database error, retrying in %.1fs: %s", pause, exc)
                    connection.close()
                    self._wait(pause, pool)
                    continue
                if self._stopping:
                    if not self._inflight and not self._unwritten:
                        logger.info("worker %s drained, exiting", c.worker_id)
                        return 0
                    if time.monotonic() >= self._stop_deadline:
                        logger.warning(
                            "worker %s grace period over: %s unfinished lease(s) left to expire",
                            c.worker_id, len(self.held()),
                        )
                        return 0
                    self._wait(min(0.1, max(0.0, self._stop_deadline - time.monotonic())), pool)
                    continue
                if c.burst and idle and not self._inflight and not self._unwritten and not services.has_work(c.queues):
                    logger.info("worker %s: burst done, nothing due or running", c.worker_id)
                    return 0
                if idle or pool.free <= 0:
                    # Nothing to claim, or no slot to claim into: block until a handler reports
                    # (or the next handler deadline passes) instead of spinning through _step.
                    self._wait(self._until_next_deadline(c.poll_seconds), pool)
        finally:
            heartbeat.stop()
            if listener is not None:
                listener.stop()
            pool.close()
            connection.close()

    def _step(self, pool: Pool) -> bool:
        """One pass: write results, expire stuck handlers, claim into free slots. True when idle."""
        self._drain(pool)
        self._linger(pool)
        self._expire_timeouts()
        self._write(pool)
        if self._stopping:
            return False
        self._schedule()
        free = pool.free
        if free <= 0:
            return False  # a completion will wake us
        if self._claim_uncertain:
            released = leases.release_unacknowledged(worker_id=self.config.worker_id, known=list(self._inflight))
            for job_id in released:
                logger.warning("job=%s claimed by a commit that was never acknowledged; released", job_id)
        # Expired leases are taken back at most once per poll interval (and on every idle poll):
        # recovery still takes at most the lease plus one POLL_SECONDS, and a busy worker's
        # claims are one statement instead of a transaction of two.
        now = time.monotonic()
        rescue = now >= self._next_rescue
        # Until the claim returns, its commit may have happened without us hearing of it.
        self._claim_uncertain = True
        jobs, _ = leases.claim(
            worker_id=self.config.worker_id,
            queues=self.config.queues,
            limit=free,
            lease_seconds=self.config.lease_seconds,
            caps=self._caps,
            rescue=rescue,
        )
        if rescue:
            self._next_rescue = now + self.config.poll_seconds
        self._claim_uncertain = False
        now = time.monotonic()
        for job in jobs:
            logger.info(
                "job=%s kind=%s attempt=%s/%s token=%s claimed", job.id, job.kind, job.attempt, job.max_attempts,
                job.lease_token,
            )
            self._inflight[job.lease_token] = _InFlight(job=job, deadline=now + executor.timeout_for(job.kind))
            self._hold(job)
            pool.submit(job)
        self.claimed += len(jobs)
        return len(jobs) < free

    def _schedule(self) -> None:
        """Every schedule_seconds, make sure each cron kind's next slot has its job."""
        if not self._crons or time.monotonic() < self._next_schedule:
            return
        self._next_schedule = time.monotonic() + self.config.schedule_seconds
        scheduler.schedule_next()

    def _until_next_deadline(self, cap: float) -> float:
        """Seconds until the earliest handler deadline not yet passed, at most `cap`."""
        now = time.monotonic()
        pending = [f.deadline - now for f in self._inflight.values() if not f.timed_out]
        return max(0.0, min([cap, *pending]))

    def _wait(self, seconds: float, pool: Pool) -> None:
        """Sleep until an event arrives or `seconds` pass; keep the event for _drain."""
        try:
            event = self._events.get(timeout=max(0.0, seconds))
        except queue.Empty:
            return
        self._events.put(event)

    def _drain(self, pool: Pool) -> None:
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if event is _WAKE:
                continue
            if isinstance(event, tuple):  # the executor itself raised
                job, exc = event
                self._unwritten.append((executor.failure(job, outcome=Outcome.FAILED_TRANSIENT, error=describe(exc)), True))
                continue
            flight = self._inflight.get(event.finish.lease_token)
            if flight is not None and flight.timed_out:
                # Its TIMED_OUT end is written already; this late result goes through the fence,
                # which refuses it, and only then frees the slot the stuck handler held.
                logger.info(
                    "job=%s attempt=%s handler returned after its timeout; result discarded",
                    event.finish.job_id, flight.job.attempt,
                )
            self._unwritten.append((event.finish, True))
            if event.seconds < self.config.linger_seconds:
                self._short_result = True

    def _linger(self, pool: Pool) -> None:
        """Collect the results of handlers finishing right after the first one (see linger_seconds)."""
        c = self.config
        if not self._short_result or not self._unwritten or self._stopping or c.linger_seconds <= 0:
            return
        deadline = time.monotonic() + c.linger_seconds
        while pool.busy > sum(1 for _, releases in self._unwritten if releases):
            remaining = min(deadline - time.monotonic(), c.linger_gap_seconds)
            if remaining <= 0:
                return
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                return
            self._events.put(event)
            self._drain(pool)

    def _expire_timeouts(self) -> None:
        now = time.monotonic()
        for flight in self._inflight.values():
            if flight.timed_out or now < flight.deadline:
                continue
            flight.timed_out = True
            job = flight.job
            seconds = executor.timeout_for(job.kind)
            finish = executor.failure(
                job, outcome=Outcome.TIMED_OUT, error=f"handler timed out after {seconds:g}s on worker {job.worker_id}"
            )
            # The slot stays counted until the handler really returns.
            self._unwritten.append((finish, False))

    def _write(self, pool: Pool) -> None:
        if not self._unwritten:
            return
        batch = self._unwritten
        # One Finish per job per statement: a late result and its timeout go in separate batches.
        first: dict[uuid.UUID, tuple[Finish, bool]] = {}
        later: list[tuple[Finish, bool]] = []
        for item in batch:
            if item[0].job_id in first:
                later.append(item)
            else:
                first[item[0].job_id] = item
        result = leases.finish([f for f, _ in first.values()])
        self._unwritten = later
        self._short_result = False
        lost = set(result.lost)
        for finish, releases in first.values():
            flight = self._inflight.get(finish.lease_token)
            self._drop(finish.job_id, finish.lease_token)
            if releases:
                self._inflight.pop(finish.lease_token, None)
                pool.release()
            attempt = flight.job.attempt if flight else "?"
            if finish.job_id in lost:
                if not (flight and flight.timed_out and releases):
                    logger.warning("job=%s attempt=%s lease lost; result discarded", finish.job_id, attempt)
                continue
            self.finished += 1
            self._log(finish, attempt)

    def _log(self, finish: Finish, attempt: Any) -> None:
        if finish.status == JobStatus.SUCCEEDED:
            logger.info("job=%s attempt=%s succeeded", finish.job_id, attempt)
        elif finish.status == JobStatus.PENDING:
            logger.warning(
                "job=%s attempt=%s %s, retry in %.1fs: %s",
                finish.job_id, attempt, finish.outcome.lower(), finish.delay, finish.error,
            )
        else:
            logger.error("job=%s attempt=%s dead (%s): %s", finish.job_id, attempt, finish.outcome.lower(), finish.error)
