"""The worker's slots: at most `size` attempts in flight, run where their handler says.

Sync handlers run on threads (made as needed), `async def` handlers on one event loop, and
handlers with isolation="process" in child processes (a thread waits on each child). Every
attempt reports back through one callback, from whatever thread ran it.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.db import connections

from .. import registry
from ..queue import ClaimedJob
from . import executor
from .aio import EventLoop
from .children import Children
from .handler_connections import drop_broken_connections

logger = logging.getLogger("reliableq.worker")


def runs_in(kind: str) -> str:
    """ "thread", "async" or "process": where an attempt of `kind` runs (an unknown kind: a thread)."""
    try:
        return registry.get(kind).runs_in
    except registry.UnknownKind:
        return "thread"


class Pool:
    """Slots, and the threads, event loop and children that run what fills them.

    A slot is taken by submit() and given back by release(), which the loop calls once the
    attempt's end is written. An attempt past its timeout is abandoned (abandon()): a coroutine is
    cancelled, a child is killed, and a thread, which cannot be stopped, is left to run on: its
    slot is given back with the TIMED_OUT end, a new thread takes it, and whatever the stuck one
    reports later is dropped. `stuck()` lists the threads so left running.
    """

    def __init__(self, size: int, report: Callable[[Any], None]) -> None:
        self.size = size
        self._report = report
        self._work: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._busy = 0
        self._idle = 0  # threads waiting for work
        self._threads = 0
        self._abandoned: set[uuid.UUID] = set()  # lease tokens whose report is dropped
        self._stuck: dict[uuid.UUID, ClaimedJob] = {}  # abandoned attempts whose thread still runs them
        self._loop: EventLoop | None = None
        self._modes: dict[str, str] = {}  # kind: runs_in(kind)
        self.children = Children()

    @property
    def busy(self) -> int:
        with self._lock:
            return self._busy

    @property
    def free(self) -> int:
        return self.size - self.busy

    def stuck(self) -> list[ClaimedJob]:
        """Attempts abandoned past their timeout whose threads still run them."""
        with self._lock:
            return list(self._stuck.values())

    def _mode(self, kind: str) -> str:
        """runs_in(kind), read once per kind for the pool's life (a handler's isolation, the ISOLATION
        setting and whether it is a coroutine do not change while a worker runs)."""
        mode = self._modes.get(kind)
        if mode is None:
            mode = self._modes[kind] = runs_in(kind)
        return mode

    def submit(self, jobs: list[ClaimedJob]) -> None:
        """Start these attempts, each in a slot of its own."""
        coroutines: list[ClaimedJob] = []
        threaded: list[ClaimedJob] = []
        for job in jobs:
            (coroutines if self._mode(job.kind) == "async" else threaded).append(job)
        with self._lock:
            if self._busy + len(jobs) > self.size:
                raise RuntimeError("The pool has no free slot; claims must be sized to free slots.")
            self._busy += len(jobs)
            # Idle threads first; a thread more for each job beyond them (one lock for the claim).
            reused = min(self._idle, len(threaded))
            self._idle -= reused
            first = self._threads + 1
            self._threads += len(threaded) - reused
        for number in range(first, first + len(threaded) - reused):
            threading.Thread(target=self._serve, name=f"reliableq-handler-{number}", daemon=True).start()
        for job in threaded:
            self._work.put(job)
        if coroutines:
            if self._loop is None:
                self._loop = EventLoop(self._deliver)
            self._loop.start(coroutines)

    def release(self, slots: int = 1) -> None:
        """Free slots: the loop calls this once their attempts' ends are written, not before.

        Freeing only after the finalize commits keeps every attempt's [started_at, finished_at]
        interval inside the time its slot was held, so in-flight counts read from attempt
        timestamps never exceed the pool size.
        """
        with self._lock:
            self._busy -= slots

    def abandon(self, job: ClaimedJob) -> None:
        """The attempt is past its timeout and its TIMED_OUT end goes out now: stop waiting for it."""
        mode = self._mode(job.kind)
        with self._lock:
            self._abandoned.add(job.lease_token)
            if mode == "thread":
                self._stuck[job.lease_token] = job
        if mode == "async" and self._loop is not None:
            self._loop.cancel(job.lease_token)
        elif mode == "process":
            self.children.kill(job.lease_token)

    def _serve(self) -> None:
        while True:
            job = self._work.get()
            if job is None:
                return
            try:
                if self._mode(job.kind) == "process":
                    outcome: Any = self.children.run(job)
                else:
                    outcome = executor.run_attempt(job)
            except BaseException as exc:  # never lose a slot or a report to a surprise
                logger.exception("job=%s attempt=%s executor crashed", job.id, job.attempt)
                outcome = (job, exc)
            finally:
                drop_broken_connections()
            self._deliver(job, outcome)
            with self._lock:
                if self._idle >= self.size:  # a thread back from being stuck, with enough idle ones
                    self._threads -= 1
                    return
                self._idle += 1

    def _deliver(self, job: ClaimedJob, outcome: Any) -> None:
        with self._lock:
            dropped = bool(self._abandoned) and job.lease_token in self._abandoned
            if dropped:
                self._abandoned.discard(job.lease_token)
                if self._stuck.pop(job.lease_token, None) is not None:
                    logger.warning(
                        "job=%s attempt=%s handler returned after its timeout; result discarded", job.id, job.attempt
                    )
        if not dropped and outcome is not None:
            self._report(outcome)

    def close(self) -> None:
        for _ in range(self._threads):
            self._work.put(None)
        if self._loop is not None:
            self._loop.close()
        self.children.close()
        connections.close_all()
