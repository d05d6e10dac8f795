"""System checks: ReliableQ's claims need PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import connections


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
