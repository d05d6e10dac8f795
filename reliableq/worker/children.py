"""Child processes for handlers with isolation="process": the attempt in a child, its lease in the worker.

A child is `python -m reliableq.worker.child`, started with subprocess (never a fork of a worker
that runs threads), that sets Django up once and then runs one attempt at a time for as long as
it lives. The worker keeps the lease, the heartbeat and the fenced finish: a child that spins in
C holding its GIL, leaks, or dies cannot stop the worker's renewals, and its death fails only its
own attempt.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from ..conf import reliableq_settings
from ..models import Outcome
from ..queue import ClaimedJob
from . import executor

logger = logging.getLogger("reliableq.worker")

KILL_GRACE_SECONDS = 5.0  # SIGTERM, then SIGKILL this long after
START_SECONDS = 120.0  # the most a new child may take to set Django up
POLL_SECONDS = 0.05  # how often a waiting thread looks for a cancel request to pass on


class ChildFailed(Exception):
    """A child could not be started, or stopped answering before it said it was ready."""


@dataclass(eq=False)
class Child:
    process: subprocess.Popen[bytes]
    conn: Connection
    attempts: int = 0
    doomed: bool = False  # killed, or to be replaced: never given another attempt
    started: float = field(default_factory=time.monotonic)


def job_fields(job: ClaimedJob) -> dict[str, Any]:
    """The claimed job as plain data for the child (its cancel event stays in the worker)."""
    return {f.name: getattr(job, f.name) for f in dataclasses.fields(job) if not f.name.startswith("_")}


def death(code: int | None) -> str:
    """How a child ended, for the attempt's error: the signal's name, or the exit status."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"died of {name} (signal {-code})"
    return f"exited with status {code}"


class Children:
    """The worker's children: idle ones wait for an attempt; at most one attempt per child at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Child] = []
        self._running: dict[uuid.UUID, Child] = {}  # lease token -> the child running that attempt
        # Attempts stopped before a child took them (a timeout shorter than a child's start): never begun.
        self._stopped: set[uuid.UUID] = set()
        self.started = 0  # children started so far (the tests and the benchmark read it)

    def run(self, job: ClaimedJob) -> executor.Result:
        """Run one attempt in a child and wait for its answer, passing on a cancel request."""
        started = time.monotonic()
        try:
            child = self._acquire()
        except ChildFailed as exc:
            error = f"no child process to run the attempt on worker {job.worker_id}: {exc}"
            finish = executor.failure(job, outcome=Outcome.FAILED_TRANSIENT, error=error)
            return executor.Result(finish=finish, seconds=0.0)
        with self._lock:
            stopped = job.lease_token in self._stopped
            self._stopped.discard(job.lease_token)
            if stopped:
                self._idle.append(child)  # it ran nothing: it stays for the next attempt
            else:
                self._running[job.lease_token] = child
        if stopped:
            error = f"stopped before a child process took the attempt on worker {job.worker_id}"
            finish = executor.failure(job, outcome=Outcome.FAILED_TRANSIENT, error=error)
            return executor.Result(finish=finish, seconds=time.monotonic() - started)
        try:
            answer = self._attempt(child, job)
        finally:
            with self._lock:
                self._running.pop(job.lease_token, None)
        if answer is None:
            child.doomed = True
            code = _reap(child)
            error = f"child process {child.process.pid} {death(code)} running the attempt on worker {job.worker_id}"
            finish = executor.failure(job, outcome=Outcome.FAILED_TRANSIENT, error=error)
            return executor.Result(finish=finish, seconds=time.monotonic() - started)
        finish, seconds, rss_mb = answer
        self._release(child, rss_mb)
        return executor.Result(finish=finish, seconds=seconds)

    def _attempt(self, child: Child, job: ClaimedJob) -> tuple[Any, float, float] | None:
        """The child's (finish, seconds, rss in MB), or None if it died first."""
        cancel_sent = False
        try:
            child.conn.send(("run", job_fields(job)))
            while True:
                if not cancel_sent and job.cancel_requested:
                    child.conn.send(("cancel", job.lease_token))
                    cancel_sent = True
                if child.conn.poll(POLL_SECONDS):
                    message = child.conn.recv()
                    if message[0] == "progress":  # job.progress() in the child: the worker writes it
                        value = message[1]
                        job.progress(value["done"], value["total"], value["note"])
                        continue
                    _, finish, seconds, rss_mb = message
                    return finish, seconds, rss_mb
        except (EOFError, OSError):
            return None

    def kill(self, token: uuid.UUID) -> None:
        """Stop the child running this attempt: SIGTERM now, SIGKILL KILL_GRACE_SECONDS later."""
        with self._lock:
            child = self._running.get(token)
            if child is None:  # not begun: its child is still starting, or the attempt waits for a thread
                self._stopped.add(token)
                return
        child.doomed = True
        _terminate(child)

    def _acquire(self) -> Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.process.poll() is None and not child.doomed:
                    return child
        return self._start()

    def _release(self, child: Child, rss_mb: float) -> None:
        child.attempts += 1
        max_jobs = reliableq_settings.CHILD_MAX_JOBS
        max_mb = reliableq_settings.CHILD_MAX_MEMORY_MB
        if max_jobs is not None and child.attempts >= int(max_jobs):
            reason = f"after {child.attempts} attempt(s) (CHILD_MAX_JOBS)"
        elif max_mb is not None and rss_mb > float(max_mb):
            reason = f"at {rss_mb:.0f} MB resident (CHILD_MAX_MEMORY_MB is {max_mb})"
        else:
            with self._lock:
                self._idle.append(child)
            return
        logger.info("child %s replaced %s", child.process.pid, reason)
        _retire(child)

    def _start(self) -> Child:
        ours, theirs = socket.socketpair()
        # The child imports the project as the worker does: the worker's import path, whatever the cwd.
        path = os.pathsep.join(p or os.getcwd() for p in sys.path)
        env = {**os.environ, "PYTHONPATH": path}
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "reliableq.worker.child", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C at the terminal reaches the worker, which decides
            )
        except OSError as exc:
            ours.close()
            raise ChildFailed(f"could not start a child process: {exc}") from None
        finally:
            theirs.close()
        child = Child(process=process, conn=Connection(ours.detach()))
        self.started += 1
        try:
            if not child.conn.poll(START_SECONDS):
                raise ChildFailed(f"the child did not set Django up within {START_SECONDS:g}s")
            child.conn.recv()  # ("ready", pid)
        except (ChildFailed, EOFError, OSError) as exc:
            _terminate(child)
            code = _reap(child)
            raise ChildFailed(f"child {process.pid} {death(code)} while starting ({exc})") from None
        return child

    def close(self) -> None:
        """Ask idle children to exit; kill the ones still running an attempt (their leases expire)."""
        with self._lock:
            idle, running = self._idle, list(self._running.values())
            self._idle = []
        for child in idle:
            _retire(child)
        for child in running:
            child.doomed = True
            _terminate(child)


def _terminate(child: Child) -> None:
    try:
        child.process.terminate()
    except OSError:
        return
    timer = threading.Timer(KILL_GRACE_SECONDS, _kill_if_alive, args=(child,))
    timer.daemon = True
    timer.start()


def _kill_if_alive(child: Child) -> None:
    if child.process.poll() is None:
        try:
            child.process.kill()
        except OSError:
            pass
    _reap(child)


def _retire(child: Child) -> None:
    """Let a healthy child exit between attempts (it finishes nothing: it is idle)."""
    try:
        child.conn.send(("exit",))
    except OSError:
        pass
    child.conn.close()
    timer = threading.Timer(KILL_GRACE_SECONDS, _kill_if_alive, args=(child,))
    timer.daemon = True
    timer.start()


def _reap(child: Child) -> int | None:
    try:
        return child.process.wait(timeout=KILL_GRACE_SECONDS + 1)
    except subprocess.TimeoutExpired:
        return None
