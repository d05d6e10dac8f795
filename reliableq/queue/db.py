"""The queue's database: its alias (RELIABLEQ["DATABASE"]), that alias's connection and transactions.

Every statement and transaction of the package goes through here, and the models' manager reads
the same alias (reliableq.models.QueueManager), so the queue can live on a database of its own.
The alias is read on each call, so override_settings takes effect at once.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..conf import reliableq_settings


def alias() -> str:
    """The alias of the database that holds the queue's tables."""
    return str(reliableq_settings.DATABASE)


def connection() -> BaseDatabaseWrapper:
    """The calling thread's connection to the queue's database."""
    return connections[alias()]


def cursor() -> CursorWrapper:
    """A cursor on the queue's database, in its current transaction (or in autocommit), binding its
    parameters on the server: Django's default cursor quotes each one into the statement's text in
    Python, which for the hot statements' arrays of ids and tokens cost more than running them."""
    conn = connection()
    binding = _server_binding() if conn.vendor == "postgresql" else None
    if binding is None:
        return conn.cursor()
    # What BaseDatabaseWrapper.cursor() does, with the other cursor class.
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    with conn.wrap_database_errors:
        return cast(CursorWrapper, conn._prepare_cursor(binding(conn.connection)))  # type: ignore[attr-defined]


@functools.cache
def _server_binding() -> Any:
    """Django's psycopg 3 cursor that binds on the server (None with psycopg 2)."""
    try:
        from django.db.backends.postgresql.base import ServerBindingCursor
    except ImportError:
        return None
    return ServerBindingCursor


def atomic(*, durable: bool = False) -> transaction.Atomic:
    """A transaction on the queue's database (a savepoint inside one already open there)."""
    return transaction.atomic(using=alias(), durable=durable)
