"""One event loop per worker process, on a thread of its own, for `async def` handlers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any


class EventLoop:
    """Runs coroutines handed to it from other threads; each attempt is a task, and takes no thread.

    A coroutine that blocks (time.sleep, sync I/O, a long computation) holds up every other
    coroutine of the process, though not the heartbeat, which has a thread of its own.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reliableq-async", daemon=True)
        self._thread.start()

    def start(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Schedule `coroutine` on the loop; its future's cancel() cancels the task."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=1.0)
