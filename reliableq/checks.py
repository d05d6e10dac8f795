"""System checks: the queue's database is PostgreSQL (E001) and exists (E003), retention names finished
statuses (E002), `migrate` puts the queue's tables on the queue's database (E004) and nowhere else (W001),
every RELIABLEQ value has its type and range (E005) and every RELIABLEQ key is a setting (E006)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings as django_settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, connections, router

from .conf import reliableq_settings
from .models import FINISHED, Job
from .queue import db

ROUTER = "reliableq.routers.QueueRouter"


@checks.register()
def check_setting_names(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Each RELIABLEQ key that is not a setting (a typo, most often), with the closest keys (E006)."""
    return [
        checks.Error(sentence, hint="Fix the key's name, or remove it.", id="reliableq.E006")
        for sentence in reliableq_settings.unknown()
    ]


@checks.register()
def check_queue_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if reliableq_settings.unknown():  # the settings cannot be read: E006 says why
        return []
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
    if reliableq_settings.unknown():  # the settings cannot be read: E006 says why
        return []
    return retention_errors(reliableq_settings.RETENTION_SECONDS)


def retention_errors(retention: Any) -> list[checks.CheckMessage]:
    """RETENTION_SECONDS maps finished statuses (and EVENT) to a positive age in seconds, or None (keep forever)."""
    finished = {str(s) for s in FINISHED} | {"EVENT"}  # and emitted events (reliableq.emit)
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


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from .conf import DEFAULTS

    user = dict(getattr(django_settings, "RELIABLEQ", {}) or {})
    return settings_errors({**DEFAULTS, **user}, given=set(user))


def _number(low: float, *, strict: bool = True, integer: bool = False, none: bool = False) -> Any:
    """A rule for a number above (or from) `low`, an integer if asked, None if allowed; and its description."""
    kind = "an integer" if integer else "a number"
    bound = f"greater than {low:g}" if strict else f"at least {low:g}"
    text = f"{kind} {bound}" + (" (or None)" if none else "")

    def ok(value: Any) -> bool:
        if value is None:
            return none
        if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
            return False
        return value > low if strict else value >= low

    return ok, text


def _choice(*allowed: Any) -> Any:
    return (lambda value: value in allowed), "one of " + ", ".join(repr(a) for a in allowed)


def _alias(none: bool = False) -> Any:
    ok = lambda value: (value is None and none) or (isinstance(value, str) and bool(value))  # noqa: E731
    return ok, "a database alias (a name in DATABASES)" + (" or None" if none else "")


def _http_queues(value: Any) -> bool:
    from .rules import QUEUE

    return (
        isinstance(value, list | tuple)
        and all(isinstance(q, str) for q in value)
        and (list(value) == ["*"] or all(QUEUE.fullmatch(q) for q in value))
    )


def _http_events(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(p, str) and 0 < len(p) <= 255 for p in value)


def _fair_weights(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(key, str) and key and _positive_number(weight) and 0.001 <= weight <= 1000
        for key, weight in value.items()
    )


RULES: dict[str, Any] = {
    "LEASE_SECONDS": _number(0),
    "MAX_ATTEMPTS": _number(1, strict=False, integer=True),
    "BACKOFF_BASE_SECONDS": _number(0, strict=False),
    "BACKOFF_MAX_SECONDS": _number(0, strict=False),
    "HANDLER_TIMEOUT_SECONDS": _number(0),
    "MAX_PAYLOAD_BYTES": _number(2, strict=False, integer=True),
    "MAX_SCHEDULE_SECONDS": _number(0),
    "FAULT_INJECTION": _choice(True, False),
    "POLL_SECONDS": _number(0),
    "LISTEN_NOTIFY": _choice(True, False),
    "DATABASE": _alias(),
    "LISTEN_DATABASE": _alias(none=True),
    "SCHEDULE_SECONDS": _number(0),
    "MAX_SNOOZES": _number(0, strict=False, integer=True),
    "MAX_ERROR_CHARS": _number(100, strict=False, integer=True),
    "XMIN_WARNING_SECONDS": _number(0, strict=False),
    "RETENTION_INTERVAL_SECONDS": _number(0),
    "HTTP_QUEUES": (_http_queues, 'a list of queue names, or ["*"] for any'),
    "HTTP_EVENTS": (_http_events, 'a list of shell-style patterns of event names ("stripe.*"), or ["*"] for any'),
    "MAX_PENDING_PER_SUBMITTER": _number(1, strict=False, integer=True, none=True),
    "ISOLATION": _choice("thread", "process"),
    "CHILD_MAX_JOBS": _number(1, strict=False, integer=True, none=True),
    "CHILD_MAX_MEMORY_MB": _number(0, none=True),
    "STATS_CACHE_SECONDS": _number(0, strict=False),
    "FAIR_WEIGHTS": (_fair_weights, "a dict from fair_key to a weight between 0.001 and 1000"),
}


def settings_errors(values: dict[str, Any], *, given: set[str] | None = None) -> list[checks.CheckMessage]:
    """Each RELIABLEQ value of the wrong type or out of range: an error naming the key, the value and
    what is allowed (reliableq.E005). RETENTION_SECONDS has a check of its own (E002)."""
    errors: list[checks.CheckMessage] = []
    for key, (ok, allowed) in RULES.items():
        if key not in values or ok(values[key]):
            continue
        where = "" if given is None or key in given else " (its default)"
        errors.append(
            checks.Error(
                f"RELIABLEQ[{key!r}] is {values[key]!r}{where}: it must be {allowed}.",
                hint=f"Set RELIABLEQ[{key!r}] to {allowed}, or leave it out for the default.",
                id="reliableq.E005",
            )
        )
    return errors
