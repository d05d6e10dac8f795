"""Events in SQL: an emit records an event once and makes every job waiting for it PENDING, in the
emitter's transaction; a wait that timed out is made PENDING by the maintenance leader.

A wait and an emit of one name are ordered by a transaction-level advisory lock on the name
(lock_key()): the emit takes it before it looks for waiting jobs, the park of a waiting job
(reliableq.queue.finishes) takes it, without waiting, before it looks for the event. Whichever
comes second sees what the first committed, so a job never waits for an event emitted already.
"""

from __future__ import annotations

import json
from typing import Any

from . import db, door
from .enqueue import CHANNEL
from .sql import EVENT, JOB, S


def lock_of(name: str) -> str:
    """SQL: the advisory lock of an event's name, given as an SQL expression (a column, a parameter)."""
    return f"hashtextextended({name}, 7151)"


_LOCK_SQL = f"SELECT pg_advisory_xact_lock({lock_of('%s')})"

_EMIT_SQL = door.statement(
    "emit",
    head=f"""made AS (
        INSERT INTO {EVENT} (name, payload, emitted_at, emitted_by) VALUES (%s, %s::jsonb, now(), %s)
        ON CONFLICT (name) DO NOTHING RETURNING id
    ),""",
    moved=f"""UPDATE {JOB} j SET status = {S.PENDING}, waiting_for = NULL, run_at = now(), updated_at = now()
               WHERE j.waiting_for = %s AND j.status = {S.WAITING} AND EXISTS (SELECT 1 FROM made)
           RETURNING j.id, j.status, j.workflow_id, j.queue""",
    change=door.Change.WOKEN,
    tail=f"""SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM made),
           (SELECT count(pg_notify('{CHANNEL}', q.queue)) FROM (SELECT DISTINCT queue FROM moved) q)""",
)

_TIMEOUTS_SQL = door.statement(
    "wake_timeouts",
    head=f"""timed_out AS MATERIALIZED (
        SELECT j.id FROM {JOB} j
         WHERE j.status = {S.WAITING} AND j.waiting_for IS NOT NULL AND j.run_at <= now()
         ORDER BY j.run_at LIMIT %s FOR UPDATE SKIP LOCKED
    ),""",
    moved=f"""UPDATE {JOB} j SET status = {S.PENDING}, waiting_for = NULL, updated_at = now()
               WHERE j.id = ANY(ARRAY(SELECT id FROM timed_out)) AND j.status = {S.WAITING}
           RETURNING j.id, j.status, j.workflow_id, j.queue""",
    change=door.Change.WOKEN,
    tail=f"""SELECT (SELECT count(*) FROM moved),
           (SELECT count(pg_notify('{CHANNEL}', q.queue)) FROM (SELECT DISTINCT queue FROM moved) q)""",
)


def emit(name: str, encoded: str, *, emitted_by: str = "") -> tuple[int, bool]:
    """Record the event `name` (payload as JSON text) unless it was emitted already, and make the jobs
    waiting for it PENDING, in the caller's transaction. (jobs woken, whether this emit made the event)."""
    with db.atomic(), db.cursor() as cursor:
        cursor.execute(_LOCK_SQL, [name])
        # A statement of its own after the lock: its snapshot sees every park that committed before.
        cursor.execute(_EMIT_SQL, [name, encoded, emitted_by, name])
        woken, made, _ = cursor.fetchone()
    return int(woken), bool(made)


def wake_timeouts(*, limit: int = 1000) -> int:
    """Make PENDING the waiting jobs whose wait timed out (their handler's wait_for raises WaitTimeout)."""
    with db.atomic(), db.cursor() as cursor:
        cursor.execute(_TIMEOUTS_SQL, [limit])
        return int(cursor.fetchone()[0])


_EVENT_SQL = f"SELECT name, payload, emitted_at, emitted_by FROM {EVENT} WHERE name = %s"


def event(name: str) -> dict[str, Any] | None:
    """The event `name` as stored (name, payload, emitted_at, emitted_by), or None."""
    with db.cursor() as cursor:
        cursor.execute(_EVENT_SQL, [name])
        row = cursor.fetchone()
    if row is None:
        return None
    payload = json.loads(row[1]) if isinstance(row[1], str) else row[1]
    return {"name": row[0], "payload": payload, "emitted_at": row[2], "emitted_by": row[3]}
