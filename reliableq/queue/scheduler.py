"""Periodic jobs: each @handler(cron=...) slot becomes one job, once across the whole fleet.

Every worker schedules the next slot of every cron kind ahead of time, with the slot in
the dedupe key: the unique constraint turns all the workers' inserts for one slot into a
single job, and that job waits as PENDING until its run_at.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import cast

from .. import registry, services
from ..conf import reliableq_settings
from ..cron import next_slot
from ..models import Job
from ..options import JobOptions
from . import db

logger = logging.getLogger("reliableq.scheduler")


def slot_key(kind: str, slot: dt.datetime) -> str:
    return f"cron:{kind}:{slot.astimezone(dt.timezone.utc).isoformat()}"


def database_now() -> dt.datetime:
    with db.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cast(dt.datetime, cursor.fetchone()[0])


def schedule_next(now: dt.datetime | None = None) -> list[Job]:
    """Make sure the next slot of every cron kind has its job; return the jobs this call created."""
    now = database_now() if now is None else now
    # A minute inside the bound that enqueue checks, so clock skew between this host and the
    # database never makes a slot's job invalid.
    horizon = now + dt.timedelta(seconds=float(reliableq_settings.MAX_SCHEDULE_SECONDS) - 60)
    created = []
    for kind, expression in registry.crons().items():
        slot = next_slot(expression, now)
        if slot > horizon:
            continue  # a yearly slot beyond the schedule bound: inserted once it comes within it
        job, new = services.submit(
            kind, {"scheduled_for": slot.isoformat()}, JobOptions(run_at=slot, dedupe_key=slot_key(kind, slot))
        )
        if new:
            logger.info("job=%s kind=%s scheduled for %s", job.id, kind, slot.isoformat())
            created.append(job)
    return created
