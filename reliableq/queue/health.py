"""Is this process ready to serve: does the queue's database answer, and is ReliableQ's schema in place there?"""

from __future__ import annotations

from django.db import DatabaseError, InterfaceError
from django.db.migrations.executor import MigrationExecutor

from . import db

_migrated = False  # once true it stays true for this process: migrations do not go backwards


def unmigrated() -> str | None:
    """What to run when ReliableQ's migrations are not all applied on the queue's database; None
    when they are, or when the database cannot be asked (a worker then waits for it as it runs)."""
    found = problems()
    return found[0] if found and "not applied" in found[0] else None


_READ_ONLY_SQL = "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::boolean"


def problems() -> list[str]:
    """What keeps this process from being ready; empty when it is ready."""
    global _migrated
    connection = db.connection()
    try:
        with connection.cursor() as cursor:
            # A standby answers reads but refuses every write: not ready, whatever SELECT 1 says.
            cursor.execute(_READ_ONLY_SQL)
            (read_only,) = cursor.fetchone()
        if read_only:
            connection.close()  # the next check connects again: a DNS name may have moved to the new primary
            return ["database is read-only (a standby, or the old primary after a failover): waiting for a primary"]
        if not _migrated:
            executor = MigrationExecutor(connection)
            pending = [
                m for m, _ in executor.migration_plan(executor.loader.graph.leaf_nodes()) if m.app_label == "reliableq"
            ]
            if pending:
                command = "manage.py migrate" + (
                    "" if connection.alias == "default" else f" --database {connection.alias}"
                )
                return [f"{len(pending)} ReliableQ migration(s) not applied: run {command}"]
            _migrated = True
    except (DatabaseError, InterfaceError) as exc:
        connection.close()
        return [f"database unavailable: {type(exc).__name__}"]
    return []
