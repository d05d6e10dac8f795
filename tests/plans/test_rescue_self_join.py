"""The rescue that stalled the benchmark for two minutes, reproduced, and the rewrite beside it.

The benchmark's state: the job table truncated, auto-analyzed while a bulk load was still in
flight (so the statistics say one row while its pages hold thousands), the load committed.
The rescue of that time joined the table to itself through a CTE (`previous`); with every
table believed to hold one row, the planner joined the two copies with a nested loop whose
inner side walks the whole primary key for each row of the outer: quadratic in the table.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction

from reliableq import queue as jobqueue
from reliableq.models import Job
from reliableq.queue import planguard
from reliableq.queue import rescues as jobqueue_rescues

from . import tables
from .conftest import Figures
from .explain import Plan, explain

# The rescue statement as it was (reliableq/jobqueue.py before the storage issue), kept to show the shape.
OLD_RESCUE = """
    WITH expired AS MATERIALIZED ({expired}),
    closed AS (
        UPDATE reliableq_attempt a
           SET outcome = 'LEASE_EXPIRED',
               finished_at = now(),
               error = format('lease expired: worker %%s stopped renewing it', a.worker_id)
          FROM expired
         WHERE a.job_id = expired.id AND a.outcome = 'RUNNING'
    ),
    previous AS (
        SELECT j.id, j.worker_id FROM reliableq_job j JOIN expired USING (id)
    )
    UPDATE reliableq_job j
       SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'DEAD' ELSE 'PENDING' END,
           run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at ELSE now() END,
           finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
           lease_token = NULL,
           lease_expires_at = NULL,
           last_error = format(
               'lease of attempt %%s/%%s expired: worker %%s stopped renewing it%%s',
               j.attempts, j.max_attempts, j.worker_id,
               CASE WHEN j.attempts >= j.max_attempts THEN '; no attempts left' ELSE '' END),
           updated_at = now()
      FROM previous
     WHERE j.id = previous.id
 RETURNING j.id, j.attempts, j.status, previous.worker_id
"""


def old_rescue(queues: tuple[str, ...] = ("default",)) -> tuple[str, tuple[Any, ...]]:
    expired = (
        Job.objects.expired()
        .in_queues(queues)
        .order_by("lease_expires_at")
        .values("id")
        .select_for_update(skip_locked=True)[: jobqueue.RESCUE_BATCH]
    )
    with transaction.atomic():
        sql, params = expired.query.get_compiler(connection=connection).as_sql()
    return OLD_RESCUE.format(expired=sql), tuple(params)


def plan_only(sql: str, params: tuple[Any, ...]) -> Plan:
    """The plan without running the statement (the old one would run for minutes at 50,000 rows)."""
    return Plan(sql=sql, plan={"Plan": planguard.plan_of(sql, params)})


def test_old_rescue_is_planned_as_a_nested_loop_over_the_whole_primary_key(plan_tables: None) -> None:
    tables.analyzed_mid_load(tables.WORKING_SET)  # 50,000 rows; the statistics say one

    old = plan_only(*old_rescue())
    new = plan_only(*jobqueue_rescues.rescue_sql(("default",)))

    assert any("reliableq_job_pkey" in join for join in old.unbounded_joins()), old.text()
    assert new.unbounded_joins() == [], (new.unbounded_joins(), new.text())
    measured = explain(*jobqueue_rescues.rescue_sql(("default",)))
    assert measured.buffers < 8_000 and measured.rows_read(tables.JOB) < 2_500, measured.text()


def test_old_rescue_reads_the_table_once_per_row_and_the_new_one_does_not(plan_tables: None, figures: Figures) -> None:
    """At 5,000 rows (a tenth of the matrix's table, so the old statement ends in seconds)."""
    tables.analyzed_mid_load(tables.WORKING_SET * 0.1)

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = '120s'")
        old = explain(*old_rescue())
    new = explain(*jobqueue_rescues.rescue_sql(("default",)))
    figures.add(state="analyzed mid-load, 5,000 rows", statement="rescue (old)", phase="as planned", plan=old)
    figures.add(state="analyzed mid-load, 5,000 rows", statement="rescue", phase="as planned", plan=new)

    # 5,000 rows, 30 expired: the old one walks the primary key once per row of the table.
    assert old.rows_read(tables.JOB) > 1_000_000, old.text()
    assert new.rows_read(tables.JOB) < 500, new.text()
    assert new.buffers * 100 < old.buffers, (new.text(), old.text())
