"""Cron expressions: the next slot after a time. A leaf module (cronsim only), so the registry can
check an expression when a handler is declared without importing the scheduler."""

from __future__ import annotations

import datetime as dt

from cronsim import CronSim, CronSimError


def next_slot(expression: str, after: dt.datetime) -> dt.datetime:
    """The first time strictly after `after` that the cron expression fires (UTC)."""
    try:
        return next(CronSim(expression, after.astimezone(dt.timezone.utc)))
    except CronSimError as exc:
        raise ValueError(f"Invalid cron expression {expression!r}: {exc}") from None
