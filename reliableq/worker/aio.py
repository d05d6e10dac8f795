"""One event loop per worker process, on a thread of its own, for `async def` handlers."""

from __future__ import annotations

import asyncio
import functools
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ..queue import ClaimedJob
from . import executor


class EventLoop:
    """Runs the attempts of async handlers as tasks; none takes a thread.

    Claimed jobs arrive in batches (one wake-up of the loop per claim, not one per job), and each
    task reports its Result, or (job, exception), through `finished`, from the loop's thread. A
    coroutine that blocks (time.sleep, sync I/O, a long computation) holds up every other coroutine
    of the process, though not the heartbeat, which has a thread of its own.
    """

    def __init__(self, finished: Callable[[ClaimedJob, Any], None]) -> None:
        self._finished = finished
        self._tasks: dict[uuid.UUID, asyncio.Task[Any]] = {}  # lease token -> task (the loop's thread only)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reliableq-async", daemon=True)
        self._thread.start()

    def start(self, jobs: list[ClaimedJob]) -> None:
        self._loop.call_soon_threadsafe(self._start, jobs)

    def cancel(self, token: uuid.UUID) -> None:
        """Cancel the attempt's task (its timeout passed); scheduled after its start, never before."""
        self._loop.call_soon_threadsafe(self._cancel, token)

    def _start(self, jobs: list[ClaimedJob]) -> None:
        for job in jobs:
            task = self._loop.create_task(executor.run_attempt_async(job))
            self._tasks[job.lease_token] = task
            task.add_done_callback(functools.partial(self._done, job))

    def _cancel(self, token: uuid.UUID) -> None:
        task = self._tasks.get(token)
        if task is not None:
            task.cancel()

    def _done(self, job: ClaimedJob, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(job.lease_token, None)
        if task.cancelled():
            outcome: Any = None
        else:
            exc = task.exception()
            outcome = task.result() if exc is None else (job, exc)
        self._finished(job, outcome)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=1.0)
