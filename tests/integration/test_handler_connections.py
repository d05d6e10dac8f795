"""A handler thread's database connection, between jobs: one a handler left broken is closed, so the
next job on that thread connects afresh; a healthy one stays open."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection

from reliableq.worker import pool
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
        pool._drop_broken_connections()
        kept = connection.connection is not None
        with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
        try:  # the second job: its connection was killed under it, and it swallows the error
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except DatabaseError:
            pass
        pool._drop_broken_connections()
        closed = connection.connection is None
        with connection.cursor() as cursor:  # the third job on this thread connects afresh
            cursor.execute("SELECT pg_backend_pid()")
            third_pid = cursor.fetchone()[0]
        connection.close()
        return kept, closed, third_pid != first_pid

    assert on_a_thread(handlers) == (True, True, True)
