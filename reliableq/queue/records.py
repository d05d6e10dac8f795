"""What the queue layer hands out and takes back: a claimed job, a finish, a rescue, a result."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import faults, outage, rules
from ..conf import reliableq_settings
from ..errors import InvalidJob, PermanentError, WaitTimeout
from ..models import StepKind
from . import db
from . import steps as recorded

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


class Suspend(BaseException):
    """Raised in a handler by job.sleep() and job.wait_for() to end the attempt there: the job sleeps
    (PENDING again in `seconds`) or waits for the event `waiting_for` (WAITING, `seconds` its timeout,
    -1 none); no attempt is spent. A BaseException, so that a handler's `except Exception` lets it by."""

    def __init__(self, *, seconds: float, waiting_for: str | None = None) -> None:
        self.seconds = seconds
        self.waiting_for = waiting_for
        what = f"waiting for event {waiting_for!r}" if waiting_for is not None else f"sleeping {seconds:g}s"
        super().__init__(what)


@dataclass(slots=True)
class _Recorded:
    """What an attempt knows of its job's records: each name with (kind, value), and the names it used."""

    found: dict[str, tuple[str, Any]]
    used: set[str] = field(default_factory=set)


def _encoded(what: str, value: Any) -> str:
    """`value` as the JSON to record, or the PermanentError that says why it cannot be (naming `what`)."""
    try:
        encoded = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"{what}: its value cannot be stored: {exc} (record JSON)") from None
    except RecursionError:
        raise PermanentError(f"{what}: its value cannot be stored: it is nested too deeply") from None
    why = rules.unstorable(value)
    limit = int(reliableq_settings.MAX_PAYLOAD_BYTES)
    if why is None and len(encoded) > limit:
        why = f"it is {len(encoded)} bytes as JSON; the limit is {limit} (MAX_PAYLOAD_BYTES)"
    if why:
        raise PermanentError(f"{what}: its value cannot be stored: {why}")
    return encoded


def _named(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 255:
        raise InvalidJob(f"{what}'s name must be a string of 1 to 255 characters, not {name!r}.", field="name")
    return name


def _seconds(seconds: Any, what: str) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
        raise InvalidJob(f"{what} takes a finite number of seconds, 0 or more, not {seconds!r}.", field="seconds")
    limit = float(reliableq_settings.MAX_SCHEDULE_SECONDS)
    if seconds > limit:
        raise InvalidJob(f"{what} of {seconds:g}s is longer than MAX_SCHEDULE_SECONDS ({limit:g}s).", field="seconds")
    return float(seconds)


async def _off_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """A database call from an async handler, on a thread of its own, not on the event loop."""
    return await asyncio.to_thread(_closing_broken, fn, *args)


def _closing_broken(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on a thread of asyncio's pool; a queue connection its error left broken there (a
    restart, a failover: the chaos suite's) is closed, or every later call on that thread, in any
    attempt, would fail on it until the job ran out of attempts."""
    try:
        return fn(*args)
    except Exception:
        conn = db.connection()
        if conn.connection is not None and conn.errors_occurred and (not conn.is_usable() or outage.on_standby(conn)):
            conn.close()
        raise


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
    # The job's records (job.step, ...), read once per attempt on first use; and whether the handler is
    # `async def` (its step, sleep and wait_for are awaited then).
    _recorded: _Recorded | None = field(default=None, compare=False, repr=False)
    _async: bool = field(default=False, compare=False, repr=False)

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
    def last_progress(self) -> dict[str, Any] | None:
        """The handler's latest job.progress() report, or None."""
        value: dict[str, Any] | None = self._last_progress
        return value

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

    # Durable steps (CONTRACT.md, "Durable steps, sleep and events"). Each sync method has an awaited
    # form for an `async def` handler, which runs its database calls off the event loop.

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` the first time this job reaches the step `name`, record its value
        (committed, fenced by this attempt's lease) and return it; every later attempt returns the
        recorded value without calling `fn`. Inside a transaction on the queue's database the record
        joins that transaction instead, and commits with it."""
        if self._async:
            return self._step_async(name, fn, args, kwargs)
        found = self._use(name, StepKind.STEP, "a step")
        if found is not None:
            return found
        faults.crash_point("before_step")
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            _close(value)
            raise PermanentError(f"step {name!r}: its function returned an awaitable in a sync handler")
        self._record(name, StepKind.STEP, value)
        return value

    async def _step_async(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        await _off_loop(self._records)
        found = self._use(name, StepKind.STEP, "a step")
        if found is not None:
            return found
        faults.crash_point("before_step")
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        await _off_loop(self._record, name, StepKind.STEP, value)
        return value

    def checkpoint(self, name: str, value: Any) -> Any:
        """Record `value` under `name`, replacing the last one, committed and fenced by the lease."""
        return self._now_or_awaited(self._checkpoint, name, value)

    def _checkpoint(self, name: str, value: Any) -> None:
        name = _named(name, "A checkpoint")
        state = self._records()
        self._kind_of(state, name, StepKind.CHECKPOINT)
        encoded = _encoded(f"checkpoint {name!r}", value)
        recorded.record(self.id, self.lease_token, self.attempt, name, StepKind.CHECKPOINT, encoded)
        state.found[name] = (StepKind.CHECKPOINT, json.loads(encoded))

    def checkpointed(self, name: str, default: Any = None) -> Any:
        """The last value recorded under `name` by any attempt of this job (job.checkpoint), or `default`."""
        return self._now_or_awaited(self._checkpointed, name, default)

    def _checkpointed(self, name: str, default: Any) -> Any:
        found = self._records().found.get(_named(name, "A checkpoint"))
        return found[1] if found is not None and found[0] == StepKind.CHECKPOINT else default

    def sleep(self, name: str, seconds: float) -> Any:
        """The first time: end this attempt (no attempt spent, no slot held) and run the job again
        `seconds` from now; when it runs again, return at once."""
        return self._now_or_awaited(self._sleep, name, seconds)

    def _sleep(self, name: str, seconds: float) -> None:
        name = _named(name, "A sleep")
        seconds = _seconds(seconds, "job.sleep()")
        self._use(name, StepKind.SLEEP, "a sleep")
        now, found, _ = recorded.wait_state(self.id, name)
        if found is None:
            until = recorded.sleep_until(self.id, self.lease_token, self.attempt, name, seconds)
            raise Suspend(seconds=max(0.0, until - now))
        until = float((found[1] or {}).get("until") or 0.0)
        if now < until:
            raise Suspend(seconds=until - now)

    def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """The payload of the event `name` if it was emitted; else end this attempt (no attempt spent,
        no slot held) and wait, WAITING, until it is emitted or `timeout` seconds pass: the job then
        runs again, and this returns the payload or raises reliableq.WaitTimeout."""
        return self._now_or_awaited(self._wait_for, name, timeout)

    def _wait_for(self, name: str, timeout: float | None) -> Any:
        name = _named(name, "An event")
        if timeout is not None:
            timeout = _seconds(timeout, "job.wait_for()'s timeout")
        self._use(name, StepKind.EVENT, "a wait")
        now, found, event = recorded.wait_state(self.id, name)
        value = (found[1] or {}) if found is not None else {}
        if found is not None and "payload" in value:
            return value["payload"]
        if event is not None:
            encoded = json.dumps({"payload": event[0]})
            recorded.record(self.id, self.lease_token, self.attempt, name, StepKind.EVENT, encoded)
            return event[0]
        if found is not None:
            until = value.get("until")
            if until is not None and now >= float(until):
                raise WaitTimeout(name)
            raise Suspend(seconds=-1.0 if until is None else float(until) - now, waiting_for=name)
        raise Suspend(seconds=-1.0 if timeout is None else timeout, waiting_for=name)

    def _now_or_awaited(self, method: Callable[..., Any], *args: Any) -> Any:
        """`method(*args)` now; for an `async def` handler, an awaitable that runs it off the event loop."""
        return _off_loop(method, *args) if self._async else method(*args)

    def _records(self) -> _Recorded:
        """What this job recorded, read once per attempt. Nothing in its first: a record needs a
        claim's lease, each claim counts an attempt, and no count goes down (a replay keeps it)."""
        state = self._recorded
        if state is None:
            found = recorded.load(self.id)[1] if self.attempt > 1 else {}
            state = _Recorded(found)
            object.__setattr__(self, "_recorded", state)
        return state

    def _kind_of(self, state: _Recorded, name: str, kind: str) -> None:
        found = state.found.get(name)
        if found is not None and found[0] != kind:
            raise InvalidJob(f"{name!r} is the name of this job's {found[0].lower()}; a {kind.lower()} needs its own.",
                             field="name")  # fmt: skip

    def _use(self, name: str, kind: str, what: str) -> Any:
        """Claim `name` for this attempt; its recorded value, or None. InvalidJob if the attempt used it already."""
        name = _named(name, what.capitalize())
        state = self._records()
        if name in state.used:
            raise InvalidJob(f"{what} named {name!r} ran already in this attempt: name each one (f'load-{{n}}').",
                             field="name")  # fmt: skip
        self._kind_of(state, name, kind)
        state.used.add(name)
        found = state.found.get(name)
        return found[1] if found is not None and kind == StepKind.STEP else None

    def _record(self, name: str, kind: str, value: Any) -> None:
        encoded = _encoded(f"step {name!r}", value)
        faults.crash_point("after_step_before_record")
        recorded.record(self.id, self.lease_token, self.attempt, name, kind, encoded)
        faults.crash_point("after_step_record")
        self._records().found[name] = (kind, value)


def _close(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


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
    # status WAITING: the event the job waits for (job.wait_for); `delay` is its timeout, -1 none.
    waiting_for: str | None = None
    # The handler's last job.progress(), written with the end: the heartbeat writes at most once a
    # second, so a report made just before the return would otherwise be lost.
    progress: dict[str, Any] | None = None


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
