"""Helpers for tests against the real PostgreSQL: database time, extra connections, threads.

Each reads the queue's database (RELIABLEQ["DATABASE"]), wherever the settings put it.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import psycopg
from django.db import connections
from django.db.models.functions import Now

from reliableq import queue as jobqueue
from reliableq.models import Job
from reliableq.queue import ClaimedJob, Rescued, db
from testproject import dburl

T = TypeVar("T")


def db_now() -> dt.datetime:
    """The queue database's transaction time (now()) on the Django connection."""
    return _scalar("SELECT now()")


def db_clock() -> dt.datetime:
    """The database's wall clock right now (clock_timestamp())."""
    return _scalar("SELECT clock_timestamp()")


def _scalar(sql: str) -> Any:
    with db.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def raw_connect(*, autocommit: bool = False) -> psycopg.Connection:
    """A second, independent connection to the queue's test database (plain psycopg, no Django)."""
    return psycopg.connect(dburl.build(db.connection().settings_dict), autocommit=autocommit)


def claim(
    *, worker_id: str = "w-test", queues: Sequence[str] = ("default",), limit: int = 10, lease_seconds: float = 30
) -> tuple[list[ClaimedJob], list[Rescued]]:
    return jobqueue.claim(worker_id=worker_id, queues=queues, limit=limit, lease_seconds=lease_seconds)


def claim_jobs(**kwargs: Any) -> list[ClaimedJob]:
    return claim(**kwargs)[0]


def expire(job_id: uuid.UUID, *, seconds: float = 1.0) -> None:
    """Make a job's lease run out, by database time."""
    Job.objects.filter(pk=job_id).update(lease_expires_at=Now() - dt.timedelta(seconds=seconds))


def make_due(job_id: uuid.UUID, *, seconds: float = 1.0) -> None:
    Job.objects.filter(pk=job_id).update(run_at=Now() - dt.timedelta(seconds=seconds))


def in_thread(fn: Callable[..., T], *args: Any, timeout: float = 60.0, **kwargs: Any) -> T:
    """Run `fn` in a new thread, so on its own Django connection; return its result or re-raise."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"{fn} still running after {timeout}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def lock_waiters() -> int:
    """How many backends of the test database are waiting for a lock now (seen from a fresh statement)."""
    return _scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )


def spawn(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """Start `fn` in its own thread (so on its own Django connection); its Future holds the result."""
    future: Future[T] = Future()

    def target() -> None:
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        finally:
            connections.close_all()

    threading.Thread(target=target, daemon=True).start()
    return future
