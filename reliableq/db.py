"""The queue's database: its alias (RELIABLEQ["DATABASE"]), that alias's connection and transactions.

Every statement and transaction of the package goes through here, and the models' manager reads
the same alias (reliableq.models.QueueManager), so the queue can live on a database of its own.
The alias is read on each call, so override_settings takes effect at once.
"""

from __future__ import annotations

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .conf import reliableq_settings


def alias() -> str:
    """The alias of the database that holds the queue's tables."""
    return str(reliableq_settings.DATABASE)


def connection() -> BaseDatabaseWrapper:
    """The calling thread's connection to the queue's database."""
    return connections[alias()]


def cursor() -> CursorWrapper:
    """A cursor on the queue's database, in its current transaction (or in autocommit)."""
    return connection().cursor()


def atomic(*, durable: bool = False) -> transaction.Atomic:
    """A transaction on the queue's database (a savepoint inside one already open there)."""
    return transaction.atomic(using=alias(), durable=durable)
