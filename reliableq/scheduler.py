"""The maintenance leader's schedule round: each slot of each enabled schedule makes one job.

A round locks the schedules whose next slot has come, makes a job for every slot due since each
one's last (through services.submit, with the dedupe key `schedule:<name>:<slot UTC>`, so a slot
has one job whoever makes it, and twice is the same row), then moves each next slot on past now,
in one transaction. A slow round therefore skips nothing; a slot a second away is made already,
PENDING until its time, so that its job starts on time.

A slot more than `late_seconds` old when a round first reaches it was missed (no worker ran): the
schedule's catch_up decides. The leader passes two scheduling intervals and two maintenance leases,
so a leader's failover or a slow round is never taken for a stopped fleet.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError

from . import cron, registry, services
from .errors import InvalidJob, UnknownKind
from .models import CatchUp, Job, Overlap
from .options import JobOptions
from .queue import db
from .queue import schedules as statements

logger = logging.getLogger("reliableq.scheduler")

AHEAD = dt.timedelta(seconds=1)  # a slot this close gets its job now (never under overlap="skip")
MAX_CATCH_UP = 1_000  # catch_up="all": at most this many missed slots, the newest
ROUND_ROWS = 100  # schedules locked per transaction
ROUND_JOBS = 2_000  # jobs per round; past it the round stops and the next tick goes on
INCLUSIVE = dt.timedelta(microseconds=1)


def slot_key(name: str, slot: dt.datetime) -> str:
    """The dedupe key of a slot's job: one job per (schedule, slot), fleet-wide, forever."""
    return f"schedule:{name}:{slot.astimezone(dt.timezone.utc).isoformat()}"


def overlap_key(name: str) -> str:
    """The unique_key of an overlap="skip" schedule's jobs: one PENDING or RUNNING at a time."""
    return f"schedule:{name}"


@dataclass(frozen=True, slots=True)
class Plan:
    slots: list[dt.datetime]  # the slots to make jobs for, oldest first
    next_slot: dt.datetime | None  # the first slot after this round's reach (None: it never fires again)
    missed_since: dt.datetime | None = None  # the oldest missed slot, when some were


def plan(
    expression: str,
    tz: dt.tzinfo,
    *,
    next_slot: dt.datetime,
    now: dt.datetime,
    late: dt.timedelta,
    catch_up: str,
    overlap: str,
) -> Plan:
    """Which slots from `next_slot` on get a job at `now` (database time)."""
    reach = now + (AHEAD if overlap == Overlap.ALLOW else dt.timedelta(0))
    cut = now - late
    slots: list[dt.datetime] = []
    missed_since = None
    after = next_slot - INCLUSIVE
    if next_slot <= cut:
        missed_since = next_slot
        older = itertools.takewhile(lambda s: s >= next_slot, cron.iter_until(expression, cut, tz))
        if catch_up == CatchUp.ALL:
            slots = list(itertools.islice(older, MAX_CATCH_UP))[::-1]
        elif catch_up == CatchUp.LATEST:
            slots = list(itertools.islice(older, 1))
        after = cut
    for slot in cron.iter_after(expression, after, tz):
        if slot > reach:
            return Plan(slots, slot, missed_since)
        slots.append(slot)
    return Plan(slots, None, missed_since)


def serve(*, late_seconds: float) -> float | None:
    """One round: make the jobs of every due slot. Returns the seconds until the next slot comes
    within reach (0: more is due now), or None when no enabled schedule has a next slot."""
    kinds = registry.kinds()  # a schedule of a kind this process cannot run waits for a worker that can
    late = dt.timedelta(seconds=late_seconds)
    now, first = statements.earliest(kinds)
    made = 0
    while first is not None and first <= now + AHEAD and made < ROUND_JOBS:
        done, complete = _batch(kinds, late, budget=ROUND_JOBS - made)
        made += done
        now, first = statements.earliest(kinds)
        if complete:
            break
    if first is None:
        return None
    return 0.0 if made >= ROUND_JOBS else max(0.0, (first - AHEAD - now).total_seconds())


def _batch(kinds: Sequence[str], late: dt.timedelta, *, budget: int) -> tuple[int, bool]:
    """Lock a batch of due schedules and make their slots' jobs, in one transaction. Returns the
    jobs made and whether every due schedule was served."""
    made = 0
    progress = []
    with db.atomic():
        now, due = statements.lock_due(kinds, ahead_seconds=AHEAD.total_seconds(), limit=ROUND_ROWS)
        for row in due:
            if made >= budget:
                break  # left locked but unchanged: the next round serves it
            try:
                step, count = _serve(row, now, late)
            except DatabaseError:
                raise  # the transaction is lost: the round is retried whole
            except Exception:  # a row this code cannot serve (edited by hand, say) stops itself, not the round
                logger.exception("schedule %s is parked (next slot cleared) until it is saved again", row.name)
                step, count = statements.Progress(id=row.id, next_slot=None), 0
            progress.append(step)
            made += count
        statements.advance(progress)
    return made, len(due) < ROUND_ROWS and len(progress) == len(due)


def _serve(row: statements.DueSchedule, now: dt.datetime, late: dt.timedelta) -> tuple[statements.Progress, int]:
    tz = cron.zone(row.timezone)  # ValueError for a zone this host lacks: parked by the caller
    p = plan(row.cron, tz, next_slot=row.next_slot, now=now, late=late, catch_up=row.catch_up, overlap=row.overlap)
    if p.missed_since is not None:
        logger.warning(
            "schedule %s: slots from %s to %s passed with no worker to make them; catch_up=%s makes %s",
            row.name, p.missed_since.isoformat(), (now - late).isoformat(), row.catch_up,
            "none" if row.catch_up == CatchUp.NONE else "the newest" if row.catch_up == CatchUp.LATEST else "each",
        )  # fmt: skip
    last: tuple[dt.datetime, Job] | None = None
    made = 0
    for slot in p.slots:
        job = _make(row, slot, tz)
        if job is not None:
            last = (slot, job)
            made += 1
    if last is None:
        return statements.Progress(id=row.id, next_slot=p.next_slot), made
    return statements.Progress(id=row.id, next_slot=p.next_slot, last_slot=last[0], last_job=last[1].id), made


def _make(row: statements.DueSchedule, slot: dt.datetime, tz: dt.tzinfo) -> Job | None:
    """The slot's job (made now, or found made already); None if the slot gets none."""
    key = slot_key(row.name, slot)
    payload = {**row.payload, "scheduled_for": slot.astimezone(tz).isoformat(), "schedule": row.name}
    options = JobOptions(
        queue=row.queue,
        priority=row.priority,
        run_at=slot,
        dedupe_key=key,
        unique_key=overlap_key(row.name) if row.overlap == Overlap.SKIP else None,
    )
    try:
        job, new = services.submit(row.kind, payload, options)
    except (InvalidJob, UnknownKind) as exc:  # a rule changed since the schedule was saved (MAX_PAYLOAD_BYTES, say)
        logger.error("schedule %s: no job for slot %s: %s", row.name, slot.isoformat(), exc)
        return None
    if job.dedupe_key != key:
        logger.info(
            "schedule %s: no job for slot %s: its job %s is still %s (overlap=skip)",
            row.name, slot.isoformat(), job.id, job.status,
        )  # fmt: skip
        return None
    if new:
        logger.debug("job=%s schedule=%s slot %s", job.id, row.name, slot.isoformat())
    return job
