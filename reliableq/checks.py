"""System checks: ReliableQ's claims need PostgreSQL (E001); retention must name finished statuses (E002)."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import connections

from .conf import reliableq_settings
from .models import FINISHED


@checks.register()
def check_default_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return postgresql_errors(connections)


def postgresql_errors(handler: Any) -> list[checks.CheckMessage]:
    vendor = handler["default"].vendor
    if vendor == "postgresql":
        return []
    return [
        checks.Error(
            f"ReliableQ needs PostgreSQL, but the default database is {vendor}.",
            hint=(
                "Workers claim jobs with SELECT ... FOR UPDATE SKIP LOCKED, which only PostgreSQL "
                "(13 or newer) provides here. Point DATABASES['default'] at a PostgreSQL server."
            ),
            id="reliableq.E001",
        )
    ]


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
