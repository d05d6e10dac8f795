"""The worker: a claim loop, a pool of handler threads and a heartbeat."""

from .loop import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig"]
