"""An operator's changes of one job's status, through the door: a cancel of a job that waits, and a
replay's reopening of a dead one."""

from __future__ import annotations

from typing import Any

from . import db, door
from .sql import JOB, STEP, S

_CANCEL_SQL = door.statement(
    "cancel",
    moved=f"""UPDATE {JOB} j SET status = {S.CANCELLED}, finished_at = now(), updated_at = now()
               WHERE j.id = %s AND j.status IN ({S.PENDING}, {S.WAITING})
           RETURNING j.id, j.status, j.workflow_id""",
    change=door.Change.ENDED,
    tail=f"SELECT id, {door.recheck()} FROM moved",
)

# A cancel asked of the run that died is not a request of the replayed one: it is cleared.
_REOPEN = f"""UPDATE {JOB} j SET status = {S.PENDING}, max_attempts = %s, run_at = now(),
                     replayed_at_attempt = j.attempts, finished_at = NULL, cancel_requested_at = NULL,
                     waiting_for = NULL, updated_at = now()
               WHERE j.id = %s AND j.status = {S.DEAD}
           RETURNING j.id, j.status, j.workflow_id"""
_REOPEN_SQL = door.statement("replay", moved=_REOPEN, change=door.Change.REOPENED, tail="SELECT id, false FROM moved")
# From the start: the job's steps and checkpoints forgotten in the same statement.
_RESTART_SQL = door.statement(
    "replay_from_the_start",
    moved=_REOPEN,
    change=door.Change.REOPENED,
    tail=f""",
    forgotten AS (DELETE FROM {STEP} s WHERE s.job_id = ANY(ARRAY(SELECT id FROM moved)))
    SELECT id, false FROM moved""",
)


def cancel_pending(job_id: Any) -> bool:
    """PENDING (or a workflow's WAITING) to CANCELLED (an operator's cancel); False if the job was neither."""
    with db.atomic(), db.cursor() as cursor:
        return bool(door.run(cursor, _CANCEL_SQL, [job_id]))


def reopen(job_id: Any, *, max_attempts: int, restart: bool = False) -> bool:
    """DEAD to PENDING (a replay) with a fresh budget, at once, its steps kept (or, `restart`, forgotten);
    False if not DEAD."""
    with db.atomic(), db.cursor() as cursor:
        return bool(door.run(cursor, _RESTART_SQL if restart else _REOPEN_SQL, [max_attempts, job_id]))
