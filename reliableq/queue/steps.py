"""What a running attempt records of its job's progress (job.step, checkpoint, sleep, wait_for), and
reads back: each write fenced by the attempt's lease token and committed on its own before the
handler goes on.

The fence locks the job's row FOR SHARE: an owner's step waits for a rescue that is taking the
job back (and then finds the token changed), and a rescue waits for a step being written; a stale
attempt records nothing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..models import StepKind
from . import db
from .sql import EVENT, JOB, STEP, S

# (kind, value) of each recorded name of a job, and the database's clock (epoch seconds) when read.
_LOAD_SQL = f"""
    SELECT extract(epoch FROM now())::float8,
           (SELECT jsonb_object_agg(s.name, jsonb_build_array(s.kind, s.value)) FROM {STEP} s WHERE s.job_id = %s)
"""

# Inserted, or (a checkpoint, a sleep or a wait of the same kind) replaced; a step is never replaced.
_RECORD_SQL = f"""
    WITH owner AS (
        SELECT j.id FROM {JOB} j WHERE j.id = %s AND (j.status = {S.RUNNING}) IS TRUE AND j.lease_token = %s FOR SHARE
    )
    INSERT INTO {STEP} (job_id, name, kind, value, attempt, created_at, updated_at)
    SELECT id, %s, %s, %s::jsonb, %s, now(), now() FROM owner
    ON CONFLICT (job_id, name) DO UPDATE SET value = EXCLUDED.value, attempt = EXCLUDED.attempt, updated_at = now()
     WHERE {STEP}.kind = EXCLUDED.kind AND EXCLUDED.kind <> '{StepKind.STEP}'
    RETURNING extract(epoch FROM now())::float8
"""

# A sleep's end, from the database's clock: {"until": now + seconds}.
_SLEEP_SQL = f"""
    WITH owner AS (
        SELECT j.id FROM {JOB} j WHERE j.id = %s AND (j.status = {S.RUNNING}) IS TRUE AND j.lease_token = %s FOR SHARE
    )
    INSERT INTO {STEP} (job_id, name, kind, value, attempt, created_at, updated_at)
    SELECT id, %s, '{StepKind.SLEEP}', jsonb_build_object('until', extract(epoch FROM now()) + %s), %s, now(), now()
      FROM owner
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING (value ->> 'until')::float8
"""

# Where a wait stands: the database's clock, the step recorded under its name, and the event if emitted.
_WAIT_SQL = f"""
    SELECT extract(epoch FROM now())::float8,
           (SELECT jsonb_build_array(s.kind, s.value) FROM {STEP} s WHERE s.job_id = %s AND s.name = %s),
           (SELECT jsonb_build_array(e.payload) FROM {EVENT} e WHERE e.name = %s)
"""


class LeaseLost(Exception):
    """The attempt no longer holds its job's lease (another owner took it back): it recorded nothing."""


@db.again_if_dropped
def load(job_id: uuid.UUID) -> tuple[float, dict[str, tuple[str, Any]]]:
    """The database's clock, and every name the job recorded: (kind, value)."""
    with db.cursor() as cursor:
        db.run(cursor, _LOAD_SQL, [job_id])
        now, found = cursor.fetchone()
    found = json.loads(found) if isinstance(found, str) else found
    return float(now), {name: (kind, value) for name, (kind, value) in (found or {}).items()}


@db.again_if_dropped
def record(job_id: uuid.UUID, token: uuid.UUID, attempt: int, name: str, kind: str, encoded: str) -> float:
    """Record `encoded` (JSON) under `name`, fenced by the lease; the database's clock when it did.
    LeaseLost if the attempt's lease is gone (or a step of that name was recorded already: so when a
    record sent again after a dropped connection had in fact committed, the next attempt reads it)."""
    with db.cursor() as cursor:
        db.run(cursor, _RECORD_SQL, [job_id, token, name, kind, encoded, attempt])
        row = cursor.fetchone()
    if row is None:
        raise LeaseLost(f"job {job_id}: this attempt no longer holds the lease; {kind.lower()} {name!r} not recorded")
    return float(row[0])


def sleep_until(job_id: uuid.UUID, token: uuid.UUID, attempt: int, name: str, seconds: float) -> float:
    """Record a sleep of `seconds` from now, fenced; when it ends (epoch seconds). LeaseLost as record()."""
    with db.cursor() as cursor:
        db.run(cursor, _SLEEP_SQL, [job_id, token, name, float(seconds), attempt])
        row = cursor.fetchone()
    if row is None:
        raise LeaseLost(f"job {job_id}: this attempt no longer holds the lease; sleep {name!r} not recorded")
    return float(row[0])


@db.again_if_dropped
def wait_state(job_id: uuid.UUID, name: str) -> tuple[float, tuple[str, Any] | None, tuple[Any] | None]:
    """(the database's clock, (kind, value) recorded under `name` or None, (payload,) of the event or None)."""
    with db.cursor() as cursor:
        db.run(cursor, _WAIT_SQL, [job_id, name, name])
        now, step, event = cursor.fetchone()
    step = json.loads(step) if isinstance(step, str) else step
    event = json.loads(event) if isinstance(event, str) else event
    return float(now), (tuple(step) if step else None), (tuple(event) if event else None)
