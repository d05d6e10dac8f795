"""The worker, in parts as River's: a producer claims into free slots, an executor runs each attempt
in a pool of threads, a completer writes their ends in fenced batches, a heartbeat renews leases,
a listener wakes the loop, and maintenance takes back expired leases and schedules cron slots.
Every database call goes through a Store."""

from .loop import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig"]
