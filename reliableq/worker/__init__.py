"""The worker, in parts as River's: a producer claims into free slots, an executor runs each attempt
(on a thread, on the event loop, or in a child process), a completer writes their ends in fenced
batches, a heartbeat renews leases, a listener wakes the loop, and maintenance takes back expired
leases and schedules cron slots. Every database call goes through a Store.

Worker and WorkerConfig load lazily, so that a child process (reliableq.worker.child) can start
before Django is set up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loop import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
