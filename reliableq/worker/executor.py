"""Run one attempt of one job and say how it ended. No SQL here: the loop writes the result."""

from __future__ import annotations

import dataclasses
import inspect
import json
import time
from dataclasses import dataclass
from typing import Any

from .. import faults, policy, registry, rules, signals, tracing
from ..conf import reliableq_settings
from ..errors import Cancelled, PermanentError, Snooze
from ..models import JobStatus, Outcome
from ..queue import ClaimedJob, Finish
from ..queue.makers import maker
from ..queue.records import Suspend
from ..sanitize import clean
from ..sanitize import describe as describe  # re-exported for the child process
from ..sanitize import traceback_of as traceback_of


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    finish: Finish
    seconds: float
    value: Any = None  # what the handler returned (stored only for keep_return handlers, via the finish)


# Finish(...) and Result(...) in half the time: one of each per attempt.
_finish = maker(Finish)
_result = maker(Result)


def handler_is_async(kind: str) -> bool:
    try:
        return registry.get(kind).is_async
    except registry.UnknownKind:
        return False


def timeout_for(kind: str) -> float:
    try:
        configured = registry.get(kind).timeout
    except registry.UnknownKind:
        configured = None
    return configured or float(reliableq_settings.HANDLER_TIMEOUT_SECONDS)


def failure(job: ClaimedJob, *, outcome: str, error: str) -> Finish:
    """The Finish for a failed attempt: a retry with jittered backoff, or DEAD."""
    decision = policy.failed(
        outcome=outcome,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        base=float(reliableq_settings.BACKOFF_BASE_SECONDS),
        maximum=float(reliableq_settings.BACKOFF_MAX_SECONDS),
    )
    return Finish(
        job_id=job.id,
        lease_token=job.lease_token,
        status=decision.status,
        outcome=decision.outcome,
        error=error,
        delay=decision.delay,
        workflow=job.workflow_id is not None,
    )


def cancelled(job: ClaimedJob, *, error: str) -> Finish:
    """The handler stopped (raised Cancelled, or failed after a cancel request): CANCELLED, no retry."""
    return Finish(
        job_id=job.id,
        lease_token=job.lease_token,
        status=JobStatus.CANCELLED,
        outcome=Outcome.CANCELLED,
        error=error,
        workflow=job.workflow_id is not None,
    )


def snoozed(job: ClaimedJob, seconds: float) -> Finish:
    """Back to PENDING in `seconds`, the attempt given back; past MAX_SNOOZES, a failure instead."""
    limit = int(reliableq_settings.MAX_SNOOZES)
    if job.snoozes >= limit:
        error = f"snoozed {job.snoozes} times, the most RELIABLEQ['MAX_SNOOZES'] allows; counted as a failure"
        return failure(job, outcome=Outcome.FAILED_TRANSIENT, error=error)
    return Finish(
        job_id=job.id,
        lease_token=job.lease_token,
        status=JobStatus.PENDING,
        outcome=Outcome.SNOOZED,
        workflow=job.workflow_id is not None,
        error=f"snoozed for {seconds:g}s",
        delay=seconds,
    )


def run_attempt(job: ClaimedJob) -> Result:
    """Call the job's (sync) handler; map what it raised to an outcome."""
    started = time.monotonic()
    # The first failure window: the job is claimed, nothing has happened yet.
    if reliableq_settings.FAULT_INJECTION:
        faults.crash_point("after_claim_before_effect")
    try:
        handler = registry.get(job.kind)
    except registry.UnknownKind as exc:
        return unknown_kind(job, exc)
    if signals.job_started.receivers:  # the list first: no lock, no call
        _started(job)
    if not tracing.enabled():  # no span to open or end: the handler alone
        try:
            value = handler.func(job)
            if value is not None and inspect.isawaitable(value):
                _refuse_awaitable(job, value)
        except Exception as exc:
            return Result(finish=failed(job, exc), seconds=time.monotonic() - started)
        except Suspend as pause:
            return Result(finish=suspended(job, pause), seconds=time.monotonic() - started)
        return succeeded(job, handler, value, started)
    with tracing.processing(job) as span:
        try:
            value = handler.func(job)
            if value is not None and inspect.isawaitable(value):
                _refuse_awaitable(job, value)
        except Exception as exc:
            return _failed_in(span, job, exc, started)
        except Suspend as pause:
            return _suspended_in(span, job, pause, started)
        return _succeeded_in(span, job, handler, value, started)


def _refuse_awaitable(job: ClaimedJob, value: Any) -> None:
    _discard(value)
    raise PermanentError(
        f"handler of {job.kind!r} returned {type(value).__name__}, an awaitable, instead of running: "
        "declare it `async def` to have it awaited, or await inside it"
    )


async def run_attempt_async(job: ClaimedJob) -> Result:
    """Await the job's `async def` handler on the running event loop; map what it raised to an outcome.

    Cancellation (its timeout, or the worker going away) propagates: the caller records TIMED_OUT.
    """
    started = time.monotonic()
    faults.crash_point("after_claim_before_effect")
    try:
        handler = registry.get(job.kind)
    except registry.UnknownKind as exc:
        return unknown_kind(job, exc)
    _started(job)
    object.__setattr__(job, "_async", True)  # its step, sleep and wait_for are awaited
    with tracing.processing(job) as span:
        try:
            value = await handler.func(job)
        except Exception as exc:
            await _drop_broken_async_connections()
            return _failed_in(span, job, exc, started)
        except Suspend as pause:
            return _suspended_in(span, job, pause, started)
        return _succeeded_in(span, job, handler, value, started)


async def _drop_broken_async_connections() -> None:
    """Close what a failed coroutine left broken on the thread Django's async ORM runs queries on
    (sync_to_async's thread-sensitive thread): nothing else would, and after a database restart or a
    failover every later attempt's query there would fail on the dead connection."""
    from asgiref.sync import sync_to_async

    from .handler_connections import drop_broken_connections

    await sync_to_async(drop_broken_connections, thread_sensitive=True)()


def _failed_in(span: Any, job: ClaimedJob, exc: Exception, started: float) -> Result:
    finish = failed(job, exc)
    tracing.ended(span, finish.outcome, exc)
    return Result(finish=finish, seconds=time.monotonic() - started)


def _suspended_in(span: Any, job: ClaimedJob, pause: Suspend, started: float) -> Result:
    finish = suspended(job, pause)
    tracing.ended(span, finish.outcome)
    return Result(finish=finish, seconds=time.monotonic() - started)


def suspended(job: ClaimedJob, pause: Suspend) -> Finish:
    """The handler slept (job.sleep) or waits for an event (job.wait_for): the attempt ends SNOOZED and
    gives its attempt back; the job is PENDING again after the sleep, or WAITING for the event. Unlike a
    Snooze, it does not count toward MAX_SNOOZES: a long job may sleep and wait many times."""
    waits = pause.waiting_for is not None
    return Finish(
        job_id=job.id,
        lease_token=job.lease_token,
        status=JobStatus.WAITING if waits else JobStatus.PENDING,
        outcome=Outcome.SNOOZED,
        error=f"waiting for event {pause.waiting_for!r}" if waits else f"sleeping for {pause.seconds:g}s",
        delay=pause.seconds,
        workflow=job.workflow_id is not None,
        waiting_for=pause.waiting_for,
    )


def _succeeded_in(span: Any, job: ClaimedJob, handler: registry.Handler, value: Any, started: float) -> Result:
    result = succeeded(job, handler, value, started)
    tracing.ended(span, result.finish.outcome, error=result.finish.error)  # a value it cannot store fails it
    return result


def _started(job: ClaimedJob) -> None:
    if signals.job_started.receivers and signals.job_started.has_listeners():  # the list first: no lock
        signals.send(signals.job_started, job_id=job.id, kind=job.kind, attempt=job.attempt, worker_id=job.worker_id)


def unknown_kind(job: ClaimedJob, exc: Exception) -> Result:
    # Most likely a rolling deploy: another worker may know the kind, so retry.
    error = clean(str(registry.unknown(job.kind, where=f" on worker {job.worker_id}")))
    return Result(finish=failure(job, outcome=Outcome.FAILED_TRANSIENT, error=error), seconds=0.0)


def failed(job: ClaimedJob, exc: BaseException) -> Finish:
    """The Finish for a handler that raised `exc`, with its traceback."""
    if isinstance(exc, Snooze):
        return snoozed(job, exc.seconds)
    if isinstance(exc, Cancelled):
        return cancelled(job, error=describe(exc))
    # A wrapper (the Tasks backend's TaskFailed) keeps what the code raised as `original`: its traceback.
    trace = traceback_of(getattr(exc, "original", None) or exc)
    if isinstance(exc, PermanentError):
        finish = failure(job, outcome=Outcome.FAILED_PERMANENT, error=describe(exc))
    elif job.cancel_requested:  # anything else is worth another try, unless an operator asked to stop
        finish = cancelled(job, error=describe(exc))
    else:
        finish = failure(job, outcome=Outcome.FAILED_TRANSIENT, error=describe(exc))
    return dataclasses.replace(finish, traceback=trace)


def succeeded(job: ClaimedJob, handler: registry.Handler, value: Any, started: float) -> Result:
    # The second failure window: the effect is done, the job is not yet finalized.
    if reliableq_settings.FAULT_INJECTION:
        faults.crash_point("after_effect_before_finalize")
    # A workflow member's value is kept too: its dependents read it as job.upstream (a missing row
    # reads as None, so a member returning None stores nothing and its finish needs no transaction).
    keeps = handler.keep_return or (job.member_name is not None and value is not None)
    if keeps:
        why = unstorable_result(value)
        if why:
            error = f"the handler's return value cannot be stored ({_why_kept(handler)}): {why}"
            finish = failure(job, outcome=Outcome.FAILED_PERMANENT, error=clean(error))
            return Result(finish=finish, seconds=time.monotonic() - started)
    decision = policy.succeeded()
    finish = _finish(
        job_id=job.id,
        lease_token=job.lease_token,
        status=decision.status,
        outcome=decision.outcome,
        keeps_return=keeps,
        return_value=value if keeps else None,
        workflow=job.workflow_id is not None,
    )
    return _result(finish=finish, seconds=time.monotonic() - started, value=value)


def _why_kept(handler: registry.Handler) -> str:
    return "keep_result" if handler.keep_return else "a workflow member's value goes to its dependents"


def unstorable_result(value: Any) -> str | None:
    """Why a return value cannot be kept as JSON within MAX_PAYLOAD_BYTES, or None."""
    try:
        encoded = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"{exc} (return JSON: dicts, lists, strings, numbers, booleans, None)"
    except RecursionError:
        return "it is nested too deeply"
    why = rules.unstorable(value)
    if why:
        return why
    limit = int(reliableq_settings.MAX_PAYLOAD_BYTES)
    if len(encoded) > limit:
        return f"it is {len(encoded)} bytes as JSON; the limit is {limit} (MAX_PAYLOAD_BYTES)"
    return None


def _discard(awaitable: Any) -> None:
    """Close a coroutine nobody will await, so Python does not warn that it was never awaited."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
