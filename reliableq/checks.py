"""System checks: the queue's database is PostgreSQL (E001) and exists (E003), retention names finished
statuses (E002), and `migrate` puts the queue's tables on the queue's database (E004) and nowhere else (W001)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core import checks
from django.db import DEFAULT_DB_ALIAS, connections, router

from . import db
from .conf import reliableq_settings
from .models import FINISHED, Job

ROUTER = "reliableq.routers.QueueRouter"


@checks.register()
def check_queue_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    found = database_errors(connections)
    return found or migration_messages(connections, db.alias(), router)


def database_errors(handler: Any) -> list[checks.CheckMessage]:
    """The aliases of DATABASE and LISTEN_DATABASE exist in DATABASES and are PostgreSQL."""
    named = {"DATABASE": db.alias()}
    if reliableq_settings.LISTEN_DATABASE:
        named["LISTEN_DATABASE"] = str(reliableq_settings.LISTEN_DATABASE)
    missing: list[checks.CheckMessage] = [
        checks.Error(
            f"RELIABLEQ[{key!r}] is {alias!r}, which is not an alias in DATABASES.",
            hint=f"Add DATABASES[{alias!r}], or name one of: {', '.join(handler)}.",
            id="reliableq.E003",
        )
        for key, alias in named.items()
        if alias not in set(handler)
    ]
    return missing or [error for alias in dict.fromkeys(named.values()) for error in postgresql_errors(handler, alias)]


def postgresql_errors(handler: Any, alias: str = DEFAULT_DB_ALIAS) -> list[checks.CheckMessage]:
    vendor = handler[alias].vendor
    if vendor == "postgresql":
        return []
    return [
        checks.Error(
            f"ReliableQ needs PostgreSQL, but the {alias} database is {vendor}.",
            hint=(
                "Workers claim jobs with SELECT ... FOR UPDATE SKIP LOCKED, which only PostgreSQL "
                f"(13 or newer) provides here. Point DATABASES[{alias!r}] at a PostgreSQL server."
            ),
            id="reliableq.E001",
        )
    ]


def migration_messages(aliases: Iterable[str], queue: str, routing: Any) -> list[checks.CheckMessage]:
    """With the queue on a database of its own, `migrate` must create its tables there, and only there."""
    if queue == DEFAULT_DB_ALIAS:
        return []
    messages: list[checks.CheckMessage] = []
    if not routing.allow_migrate_model(queue, Job):
        messages.append(
            checks.Error(
                f"RELIABLEQ['DATABASE'] is {queue!r}, but the database routers never let migrate create "
                f"ReliableQ's tables there.",
                hint=f"Add {ROUTER!r} to DATABASE_ROUTERS (before routers that claim every app), then run "
                f"manage.py migrate --database {queue}.",
                id="reliableq.E004",
            )
        )
    also = [alias for alias in aliases if alias != queue and routing.allow_migrate_model(alias, Job)]
    if also:
        messages.append(
            checks.Warning(
                f"RELIABLEQ['DATABASE'] is {queue!r}, but migrate would also create ReliableQ's tables on "
                f"{', '.join(map(repr, also))}, and your own ORM writes of new jobs would go to the default database.",
                hint=f"Add {ROUTER!r} to DATABASE_ROUTERS: it keeps ReliableQ's tables, and only them, on {queue!r}.",
                id="reliableq.W001",
            )
        )
    return messages


@checks.register()
def check_retention(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return retention_errors(reliableq_settings.RETENTION_SECONDS)


def retention_errors(retention: Any) -> list[checks.CheckMessage]:
    """RETENTION_SECONDS maps finished statuses to a positive age in seconds, or None (keep forever)."""
    finished = {str(s) for s in FINISHED}
    problems = []
    if not isinstance(retention, dict):
        problems.append(f"it is a {type(retention).__name__}, not a dict")
    else:
        problems += [f"{status!r} is not a finished status" for status in retention if status not in finished]
        problems += [
            f"{status}: {seconds!r} is not a positive number of seconds or None"
            for status, seconds in retention.items()
            if seconds is not None and not _positive_number(seconds)
        ]
    if not problems:
        return []
    return [
        checks.Error(
            "RELIABLEQ['RETENTION_SECONDS'] is invalid: " + "; ".join(problems) + ".",
            hint=f"Map any of {', '.join(sorted(finished))} to seconds (or None to keep those jobs forever).",
            id="reliableq.E002",
        )
    ]


def _positive_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and value > 0
