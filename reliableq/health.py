"""Is this process ready to serve: does the database answer, and is ReliableQ's schema in place?"""

from __future__ import annotations

from django.db import DatabaseError, InterfaceError, connection
from django.db.migrations.executor import MigrationExecutor

_migrated = False  # once true it stays true for this process: migrations do not go backwards


def problems() -> list[str]:
    """What keeps this process from being ready; empty when it is ready."""
    global _migrated
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        if not _migrated:
            executor = MigrationExecutor(connection)
            pending = [
                m for m, _ in executor.migration_plan(executor.loader.graph.leaf_nodes()) if m.app_label == "reliableq"
            ]
            if pending:
                return [f"{len(pending)} ReliableQ migration(s) not applied: run manage.py migrate"]
            _migrated = True
    except (DatabaseError, InterfaceError) as exc:
        connection.close()
        return [f"database unavailable: {type(exc).__name__}"]
    return []
