"""An operator's changes of one job's status, through the door: a cancel of a job that waits, and a
replay's reopening of a dead one."""

from __future__ import annotations

from typing import Any

from . import db, door
from .sql import JOB, S

_CANCEL_SQL = door.statement(
    "cancel",
    moved=f"""UPDATE {JOB} j SET status = {S.CANCELLED}, finished_at = now(), updated_at = now()
               WHERE j.id = %s AND j.status IN ({S.PENDING}, {S.WAITING})
           RETURNING j.id, j.status, j.workflow_id""",
    change=door.Change.ENDED,
    tail=f"SELECT id, {door.recheck()} FROM moved",
)

# A cancel asked of the run that died is not a request of the replayed one: it is cleared.
_REOPEN_SQL = door.statement(
    "replay",
    moved=f"""UPDATE {JOB} j SET status = {S.PENDING}, max_attempts = %s, run_at = now(),
                     finished_at = NULL, cancel_requested_at = NULL, updated_at = now()
               WHERE j.id = %s AND j.status = {S.DEAD}
           RETURNING j.id, j.status, j.workflow_id""",
    change=door.Change.REOPENED,
    tail="SELECT id, false FROM moved",
)


def cancel_pending(job_id: Any) -> bool:
    """PENDING (or a workflow's WAITING) to CANCELLED (an operator's cancel); False if the job was neither."""
    with db.atomic(), db.cursor() as cursor:
        return bool(door.run(cursor, _CANCEL_SQL, [job_id]))


def reopen(job_id: Any, *, max_attempts: int) -> bool:
    """DEAD to PENDING (a replay) with a fresh budget, at once; False if not DEAD."""
    with db.atomic(), db.cursor() as cursor:
        return bool(door.run(cursor, _REOPEN_SQL, [max_attempts, job_id]))
