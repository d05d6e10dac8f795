"""Parked jobs, which hold no slot and no lease: jobs WAITING for an event, and PENDING jobs in a sleep.

Both counts read only what is parked now, through partial indexes, whatever the tables keep besides:
the waiting jobs through reliableq_job_waiting_for (status WAITING with an event), the sleeps through
reliableq_step_sleep_until (SLEEP steps by when they end; a step is kept after its sleep is over).
"""

from __future__ import annotations

from ..models import StepKind
from . import db
from .sql import JOB, STEP, S
from .stats import _through_indexes

# A job sleeps while it is PENDING and a sleep it recorded ends after now (counted once per job). The
# sleeps not over yet come first, from their index; their jobs are then looked up by id, so that the
# count never walks the PENDING jobs (a due backlog of any size): "IS TRUE" keeps the planner off the
# partial index of PENDING jobs, whatever the statistics say, for the primary key. A cancelled job's
# sleep is not counted.
_PARKED_SQL = f"""
    SELECT (SELECT count(*) FROM {JOB} j WHERE j.status = {S.WAITING} AND j.waiting_for IS NOT NULL),
           (SELECT count(*) FROM {JOB} j
             WHERE j.id = ANY(ARRAY(
                     SELECT DISTINCT s.job_id FROM {STEP} s
                      WHERE s.kind = '{StepKind.SLEEP}'
                        AND ((s.value ->> 'until'))::double precision > extract(epoch FROM now())))
               AND (j.status = {S.PENDING}) IS TRUE)
"""


def parked() -> tuple[int, int]:
    """(jobs WAITING for an event, PENDING jobs in a sleep that has not ended), by the database's clock."""
    with _through_indexes(), db.cursor() as cursor:
        cursor.execute(_PARKED_SQL)
        waiting, sleeping = cursor.fetchone()
    return int(waiting), int(sleeping)
