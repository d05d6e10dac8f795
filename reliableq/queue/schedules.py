"""The schedules' statements: the leader's round (the earliest slot, the due rows locked, their
progress written) and the rows that code declares, written when a worker starts.

Only the leader reads due rows, each round locking them with SKIP LOCKED: two leaders for a moment
(a paused one waking) serve different rows, and an operator's edit waits for the round's short
transaction, or is skipped by it until the next round. A slot's job is one row by its dedupe key
whoever makes it (reliableq.scheduler).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..models import Overlap, Schedule
from . import db

SCHEDULE = Schedule._meta.db_table


@dataclass(frozen=True, slots=True, kw_only=True)
class DueSchedule:
    """A schedule whose next slot has come (or comes within the round's horizon), locked for the round."""

    id: int
    name: str
    kind: str
    cron: str
    payload: dict[str, Any]
    timezone: str
    catch_up: str
    overlap: str
    queue: str
    priority: int
    next_slot: dt.datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """What a round did for one schedule: the next slot to make, and the newest slot it made a job for."""

    id: int
    next_slot: dt.datetime | None
    last_slot: dt.datetime | None = None
    last_job: uuid.UUID | None = None


_NOW_SQL = "SELECT now()"


def database_now() -> dt.datetime:
    with db.cursor() as cursor:
        cursor.execute(_NOW_SQL)
        return cast(dt.datetime, cursor.fetchone()[0])


_EARLIEST_SQL = f"""
            SELECT now(), (SELECT next_slot FROM {SCHEDULE}
                            WHERE enabled AND next_slot IS NOT NULL AND kind = ANY(%s)
                            ORDER BY next_slot LIMIT 1)
            """


def earliest(kinds: Sequence[str]) -> tuple[dt.datetime, dt.datetime | None]:
    """(now, the earliest next slot of the enabled schedules of these kinds, or None): the round's
    only statement while nothing is due."""
    with db.cursor() as cursor:
        cursor.execute(
            _EARLIEST_SQL,
            [list(kinds)],
        )
        now, first = cursor.fetchone()
    return now, first


_LOCK_DUE_SQL = f"""
            SELECT now(), id, name, kind, cron, payload::text, timezone, catch_up, overlap, queue, priority, next_slot
              FROM {SCHEDULE}
             WHERE enabled AND kind = ANY(%s) AND next_slot <= now() + make_interval(secs => %s)
               AND next_slot <= now() + make_interval(secs => CASE WHEN overlap = %s THEN %s ELSE 0 END)
             ORDER BY next_slot
             LIMIT %s
               FOR UPDATE SKIP LOCKED
            """


def lock_due(kinds: Sequence[str], *, ahead_seconds: float, limit: int) -> tuple[dt.datetime, list[DueSchedule]]:
    """In the caller's transaction: (now, the enabled schedules of these kinds whose next slot has
    come, or is at most `ahead_seconds` away for those that allow overlap, earliest first, locked;
    rows another transaction holds are skipped)."""
    with db.cursor() as cursor:
        cursor.execute(
            _LOCK_DUE_SQL,
            [list(kinds), float(ahead_seconds), str(Overlap.ALLOW), float(ahead_seconds), int(limit)],
        )
        rows = cursor.fetchall()
    if not rows:
        return database_now(), []
    due = [
        DueSchedule(
            id=row[1], name=row[2], kind=row[3], cron=row[4], payload=json.loads(row[5]), timezone=row[6],
            catch_up=row[7], overlap=row[8], queue=row[9], priority=row[10], next_slot=row[11],
        )
        for row in rows
    ]  # fmt: skip
    return rows[0][0], due


_ADVANCE_SQL = f"""
            UPDATE {SCHEDULE} s
               SET next_slot = p.next_slot,
                   last_slot = COALESCE(p.last_slot, s.last_slot),
                   last_job = COALESCE(p.last_job, s.last_job),
                   updated_at = now()
              FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[], %s::uuid[])
                   AS p(id, next_slot, last_slot, last_job)
             WHERE s.id = p.id
            """


def advance(progress: Sequence[Progress]) -> None:
    """Write each schedule's next slot, and its last slot and job where the round made one."""
    if not progress:
        return
    with db.cursor() as cursor:
        cursor.execute(
            _ADVANCE_SQL,
            [
                [p.id for p in progress],
                [p.next_slot for p in progress],
                [p.last_slot for p in progress],
                [p.last_job for p in progress],
            ],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Declared:
    """A schedule as code declares it, with its first slot after now (used if its row is new or its
    cron or time zone changed)."""

    name: str
    kind: str
    cron: str
    payload: str  # JSON
    timezone: str
    catch_up: str
    overlap: str
    queue: str
    priority: int
    next_slot: dt.datetime | None


_FIELDS = ("kind", "cron", "payload", "timezone", "catch_up", "overlap", "queue", "priority")
_CHANGED = " OR ".join(f"s.{f} IS DISTINCT FROM EXCLUDED.{f}" for f in _FIELDS)


_SYNC_SQL = f"""
            INSERT INTO {SCHEDULE} AS s (name, kind, cron, payload, timezone, enabled, catch_up, overlap, queue,
                                         priority, from_code, next_slot, created_at, updated_at)
            SELECT d.name, d.kind, d.cron, d.payload::jsonb, d.timezone, true, d.catch_up, d.overlap, d.queue,
                   d.priority, true, d.next_slot, now(), now()
              FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                          %s::text[], %s::int[], %s::timestamptz[])
                   AS d(name, kind, cron, payload, timezone, catch_up, overlap, queue, priority, next_slot)
            ON CONFLICT (name) DO UPDATE
               SET {", ".join(f"{f} = EXCLUDED.{f}" for f in _FIELDS)},
                   from_code = true,
                   next_slot = CASE WHEN NOT s.enabled THEN NULL
                                    WHEN s.cron IS DISTINCT FROM EXCLUDED.cron
                                      OR s.timezone IS DISTINCT FROM EXCLUDED.timezone
                                      OR NOT s.from_code OR s.next_slot IS NULL THEN EXCLUDED.next_slot
                                    ELSE s.next_slot END,
                   updated_at = now()
             WHERE {_CHANGED} OR NOT s.from_code OR (s.enabled AND s.next_slot IS NULL)
            RETURNING s.name, s.xmax = 0  -- 0: the row was inserted, not updated
            """


_SYNC_DELETE_SQL = f"DELETE FROM {SCHEDULE} WHERE from_code AND NOT (name = ANY(%s)) RETURNING name"


def sync(declared: Sequence[Declared]) -> tuple[list[str], list[str], list[str]]:
    """Create or update the rows of the schedules code declares, and delete the rows code declared
    before and declares no more. Returns the names (created, updated, deleted).

    An operator's `enabled` survives: a disabled row stays disabled (its next slot NULL). A row whose
    cron or time zone changed, or that an operator made, restarts from its next slot after now; an
    unchanged row is not written at all, so a fleet's starts leave the table as it was.
    """
    with db.atomic(), db.cursor() as cursor:
        cursor.execute(
            _SYNC_SQL,
            [[getattr(d, name) for d in declared] for name in ("name", *_FIELDS, "next_slot")],
        )
        written = cursor.fetchall()
        cursor.execute(
            _SYNC_DELETE_SQL,
            [[d.name for d in declared]],
        )
        deleted = [row[0] for row in cursor.fetchall()]
    created = [name for name, new in written if new]
    updated = [name for name, new in written if not new]
    return created, updated, deleted
