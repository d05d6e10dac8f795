"""The JSON shape of a job and its attempts, written out: the same on every route, and cheap.

(A ModelSerializer rebuilt its fields for every job; this is a function per shape.)
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable
from typing import Any

from ..models import Attempt, Job, JobStatus, Step
from ..queue.stats import QueueSummary
from ..sanitize import without_traceback


@functools.lru_cache(maxsize=256)  # a batch's jobs share their created_at, updated_at and mostly run_at
def time(value: dt.datetime | None) -> str | None:
    """ISO 8601 in UTC with a Z, as DRF renders times."""
    if value is None:
        return None
    text = value.astimezone(dt.timezone.utc).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def job(job: Job, attempts: Iterable[Attempt], *, tracebacks: bool) -> dict[str, Any]:
    """A job with its attempt history: `attempts` is the list, `attempt_count` the number.

    Errors keep their tracebacks only when `tracebacks` (the reader holds reliableq.view_job);
    anyone else who sees a job (its submitter, through a repeated Idempotency-Key) reads the
    first lines without the server's stack.
    """
    error = job.last_error if tracebacks else without_traceback(job.last_error)
    return {
        "id": str(job.id),
        "kind": job.kind,
        "queue": job.queue,
        "priority": job.priority,
        "payload": job.payload,
        "status": job.status,
        "attempt_count": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": time(job.run_at),
        "lease_expires_at": time(job.lease_expires_at),
        "worker_id": job.worker_id,
        "last_error": error,
        "dedupe_key": job.dedupe_key,
        "effect_key": job.effect_key,
        "submitted_by": job.submitted_by or None,
        "concurrency_key": job.concurrency_key,
        "fair_key": job.fair_key,
        "unique_key": job.unique_key,
        "snoozes": job.snoozes,
        "cancel_requested": job.cancel_requested_at is not None,
        "progress": job.progress,
        "waiting_for": job.waiting_for,
        "waiting_until": waiting_until(job),
        # (Read only for a job that can have one: a job just made never costs the query.)
        "result": job.result if job.status == JobStatus.SUCCEEDED else None,
        "created_at": time(job.created_at),
        "updated_at": time(job.updated_at),
        "finished_at": time(job.finished_at),
        "attempts": [attempt(a, tracebacks=tracebacks) for a in attempts],
    }


def waiting_until(job: Job) -> str | None:
    """When a job WAITING for an event stops waiting (its wait_for raises WaitTimeout): its run_at; None
    when it waits without a timeout (run_at 9999-12-31) or waits for no event."""
    if job.waiting_for is None or job.status != JobStatus.WAITING or job.run_at is None or job.run_at.year >= 9999:
        return None
    return time(job.run_at)


def steps(recorded: Iterable[Step], *, values: bool) -> list[dict[str, Any]]:
    """What a job recorded (job.step, checkpoint, sleep, wait_for), in order; `at` is the last write.
    Values only when `values` (the reader holds reliableq.view_job): a step's value is the handler's data."""
    shown = []
    for step in recorded:
        item = {"name": step.name, "kind": step.kind, "attempt": step.attempt, "at": time(step.updated_at)}
        if values:
            item["value"] = step.value
        shown.append(item)
    return shown


def attempt(attempt: Attempt, *, tracebacks: bool) -> dict[str, Any]:
    """An attempt; its traceback (the handler's code and paths) only for readers holding reliableq.view_job."""
    shown = {
        "number": attempt.number,
        "worker_id": attempt.worker_id,
        "lease_token": str(attempt.lease_token),
        "started_at": time(attempt.started_at),
        "finished_at": time(attempt.finished_at),
        "outcome": attempt.outcome,
        "error": attempt.error if tracebacks else without_traceback(attempt.error),
    }
    if tracebacks:
        shown["traceback"] = attempt.traceback
    return shown


def queue(summary: QueueSummary) -> dict[str, Any]:
    """A queue: its pause state and its unfinished work (reliableq.stats.QueueSummary)."""
    return {
        "name": summary.name,
        "paused": summary.paused,
        "paused_until": time(summary.paused_until),
        "paused_by": summary.paused_by or None,
        "pending": summary.pending,
        "running": summary.running,
        "oldest_due_age_seconds": summary.oldest_due_age_seconds,
    }


def workflow(
    record: Any,
    members: Iterable[Job],
    callbacks: Iterable[Job],
    after: dict[Any, list[str]],
    *,
    next_page: str | None = None,
) -> dict[str, Any]:
    """A workflow with a page of its members (each with the names it runs after), the callbacks
    fired, and `next`, the next page's URL (None on the last)."""
    return {
        "id": str(record.id),
        "name": record.name,
        "status": record.status,
        "run": record.run,
        "cancel_requested": record.cancel_requested_at is not None,
        "created_at": time(record.created_at),
        "finished_at": time(record.finished_at),
        "members": [
            {"name": m.member_name, "id": str(m.id), "kind": m.kind, "status": m.status, "after": after.get(m.id, [])}
            for m in members
        ],
        "callbacks": [
            {
                "event": c.callback[1],
                "run": _run_of(c),
                "id": str(c.id),
                "kind": c.kind,
                "status": c.status,
            }
            for c in callbacks
        ],
        "next": next_page,
    }


def _run_of(callback: Job) -> int | None:
    run = callback.callback[0]
    return int(run) if run.isdecimal() else None
