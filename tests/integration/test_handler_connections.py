"""A handler thread's database connection, between jobs: one a handler left broken is closed, so the
next job on that thread connects afresh; a healthy one stays open. The same for the thread on which
async handlers' ORM queries run."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connection

from reliableq.models import Outcome
from reliableq.queue import ClaimedJob
from reliableq.worker import executor, handler_connections
from testproject import dburl

pytestmark = pytest.mark.django_db(transaction=True)


def on_a_thread(work: Callable[[], Any]) -> Any:
    """Run `work` on a thread of its own (a handler's), as the pool does; return what it returned."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join(30)
    return out[0]


def test_a_connection_a_handler_broke_is_closed_and_a_healthy_one_kept() -> None:
    def handlers() -> tuple[bool, bool, int]:
        with connection.cursor() as cursor:  # the first job: connects, and leaves it healthy
            cursor.execute("SELECT pg_backend_pid()")
            first_pid = cursor.fetchone()[0]
        handler_connections.drop_broken_connections()
        kept = connection.connection is not None
        with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
        try:  # the second job: its connection was killed under it, and it swallows the error
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except DatabaseError:
            pass
        handler_connections.drop_broken_connections()
        closed = connection.connection is None
        with connection.cursor() as cursor:  # the third job on this thread connects afresh
            cursor.execute("SELECT pg_backend_pid()")
            third_pid = cursor.fetchone()[0]
        connection.close()
        return kept, closed, third_pid != first_pid

    assert on_a_thread(handlers) == (True, True, True)


def test_an_async_handler_that_met_a_dead_connection_leaves_none_for_the_next_attempt() -> None:
    """Django's async ORM runs its queries on one thread (sync_to_async's thread-sensitive one), which
    no handler thread's clean-up reaches: after a database restart or a failover its connection is
    dead, and every later attempt of every async handler that queries would fail on it."""

    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    def claimed() -> ClaimedJob:
        return ClaimedJob(id=uuid.uuid4(), kind="test.async_echo", queue="default", priority=0, payload={},
                          attempt=1, max_attempts=3, lease_token=uuid.uuid4(), worker_id="w1")  # fmt: skip

    async def attempts() -> tuple[str, str, bool]:
        first_pid = await sync_to_async(backend_pid)()
        with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
        failed = await executor.run_attempt_async(claimed())  # its query meets the dead connection
        succeeded = await executor.run_attempt_async(claimed())  # a new connection, on the same thread
        fresh = await sync_to_async(backend_pid)() != first_pid
        await sync_to_async(lambda: connection.close())()  # that thread's connection, not this one's
        return failed.finish.outcome, succeeded.finish.outcome, fresh

    assert asyncio.run(attempts()) == (Outcome.FAILED_TRANSIENT, Outcome.SUCCEEDED, True)
