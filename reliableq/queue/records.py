"""What the queue layer hands out and takes back: a claimed job, a finish, a rescue, a result."""

from __future__ import annotations

import math
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

_CANCEL_LOCK = threading.Lock()


MAX_PROGRESS_NOTE = 200


def progress_value(done: Any, total: Any = None, note: Any = "") -> dict[str, Any]:
    """A progress report checked: numbers that JSON can hold, a short note."""
    for name, number in (("done", done), ("total", total)):
        if number is None and name == "total":
            continue
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise TypeError(f"job.progress(): {name} must be a finite number, not {number!r}.")
    if not isinstance(note, str):
        raise TypeError("job.progress(): note must be a string.")
    return {"done": done, "total": total, "note": note[:MAX_PROGRESS_NOTE]}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedJob:
    """What a handler sees: one attempt of one job, owned under one lease token."""

    id: uuid.UUID
    kind: str
    queue: str
    priority: int
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    worker_id: str
    snoozes: int = 0
    concurrency_key: str | None = None
    run_at: Any = None  # when it became due: where the claim found it (reliableq.floors)
    trace_context: dict[str, str] | None = None  # the enqueuing span's, for the attempt's span (reliableq.tracing)
    workflow_id: uuid.UUID | None = None  # a workflow's member or callback
    member_name: str | None = None  # a member's name in its workflow (None: not a member)
    # For a member: each upstream member's name and the value its handler returned.
    upstream: dict[str, Any] = field(default_factory=dict)
    # Made on first use (most jobs never need one): set by the heartbeat when its renewal finds that
    # an operator asked to cancel this job.
    _cancel: threading.Event | None = field(default=None, compare=False, repr=False)
    # Where job.progress() reports (the worker's ledger, or a child's socket); None: kept on the job.
    _sink: Any = field(default=None, compare=False, repr=False)
    _last_progress: Any = field(default=None, compare=False, repr=False)

    def progress(self, done: float, total: float | None = None, note: str = "") -> None:
        """Say how far the handler is: recorded at most once a second, fenced by this attempt's lease.

        The admin's job page and GET /v1/jobs/<id> show the latest ({done, total, note, at}). Cheap
        to call often: nothing is written from the handler's thread, so async handlers may call it too.
        """
        value = progress_value(done, total, note)
        object.__setattr__(self, "_last_progress", value)
        if self._sink is not None:
            self._sink(self, value)

    @property
    def cancel(self) -> threading.Event:
        """Set once an operator asked to cancel this running job: a handler may wait on it."""
        event = self._cancel
        if event is None:
            with _CANCEL_LOCK:
                event = self._cancel
                if event is None:
                    event = threading.Event()
                    object.__setattr__(self, "_cancel", event)
        return event

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked to cancel this running job (learned at a lease renewal)."""
        event = self._cancel
        return event is not None and event.is_set()

    @property
    def idempotency_key(self) -> str:
        """The effect key: the same on every attempt and every replay of this job."""
        return f"reliableq:{self.kind}:{self.id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """How one attempt ended and what becomes of its job."""

    job_id: uuid.UUID
    lease_token: uuid.UUID
    # SUCCEEDED, PENDING (a retry or a snooze), DEAD or CANCELLED. A retry or a snooze of a job an
    # operator asked to cancel ends CANCELLED instead, decided in the finish statement.
    status: str
    outcome: str
    error: str = ""
    delay: float = 0.0
    keeps_return: bool = False  # store return_value if (and only if) this finish passes the fence
    return_value: Any = None
    traceback: str = ""  # a failed attempt's redacted, bounded traceback (Attempt.traceback)
    workflow: bool = False  # the job is a workflow's: its end may release others (reliableq.queue.workflows)


@dataclass(frozen=True, slots=True)
class Rescued:
    job_id: uuid.UUID
    attempt: int
    status: str
    previous_worker: str


@dataclass(slots=True)
class FinishResult:
    finalized: list[uuid.UUID] = field(default_factory=list)
    lost: list[uuid.UUID] = field(default_factory=list)
    # Finalized jobs the statement ended CANCELLED instead of retrying them (an operator had asked).
    cancelled: set[uuid.UUID] = field(default_factory=set)
