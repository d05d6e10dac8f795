"""The guard analyzes the job table when a pick would leave its index, and only then."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection, transaction

from reliableq import queue as jobqueue
from reliableq.queue import pick as jobqueue_pick
from reliableq.queue import planguard
from testproject import dburl

from . import tables


def pick() -> tuple[str, tuple[object, ...]]:
    """A pick of 10 due jobs from "default" as claims made it before queues could be paused.

    The claim's own pick now carries the paused-queue check, a one-time filter, and with it the
    planner keeps to the due index under the statistics of analyzed_mid_load on PostgreSQL 15
    (by a fraction of a cost unit), not on 18. This older form leaves the index in that state
    on both, so the guard is tested on it.
    """
    from reliableq.models import Job

    due = Job.objects.due().filter(queue="default").order_by("priority", "run_at").values("id", "priority", "run_at")
    with transaction.atomic():
        sql, params = due.select_for_update(skip_locked=True)[:10].query.sql_with_params()
        return sql, tuple(params)


def pick_reads() -> list[str]:
    return planguard.scans(planguard.plan_of(*pick()), tables.JOB)


def last_analyze() -> object:
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_analyze FROM pg_stat_user_tables WHERE relid = %s::regclass", [tables.JOB])
        return cursor.fetchone()[0]


def test_the_guard_repairs_statistics_that_hide_the_backlog(
    plan_tables: None, caplog: pytest.LogCaptureFixture
) -> None:
    tables.analyzed_mid_load(tables.WORKING_SET)  # 50,000 rows; the statistics say one
    assert pick_reads() != [jobqueue.DUE_INDEX]

    with caplog.at_level(logging.WARNING, logger="reliableq.planguard"):
        assert planguard.keep_index(*pick(), table=tables.JOB, index=jobqueue.DUE_INDEX) is True

    assert pick_reads() == [jobqueue.DUE_INDEX]
    assert "statistics of reliableq_job look stale" in caplog.text


def test_a_claim_with_rescue_leaves_its_pick_on_the_due_index(plan_tables: None) -> None:
    # Under these statistics the claim's own pick keeps its index on PostgreSQL 15 (the paused
    # check, a one-time filter, tips the costs) and leaves it on PostgreSQL 18: either way, after
    # a claim with rescue, which runs the guard first, the pick reads the due index.
    tables.analyzed_mid_load(tables.WORKING_SET)
    jobs, rescued = jobqueue.claim(worker_id="w-plans", queues=("default",), limit=10, lease_seconds=30)
    assert len(jobs) == 10 and rescued
    claim_pick = jobqueue_pick.picked_sql(("default",), 10, (), None)
    assert set(planguard.scans(planguard.plan_of(*claim_pick), tables.JOB)) == {jobqueue.DUE_INDEX}  # walk and ranges


def test_right_statistics_are_left_alone(plan_tables: None) -> None:
    tables.analyzed_mid_load(tables.WORKING_SET)
    tables.analyze()
    analyzed = last_analyze()

    assert pick_reads() == [jobqueue.DUE_INDEX]
    assert planguard.keep_index(*pick(), table=tables.JOB, index=jobqueue.DUE_INDEX) is False
    assert last_analyze() == analyzed


def test_a_small_table_is_never_analyzed_for_its_plan(plan_tables: None) -> None:
    tables.truncate()
    tables.load(tables.WORKING_SET * 0.01)  # 500 rows: any plan reads a few pages
    assert planguard.keep_index(*pick(), table=tables.JOB, index=jobqueue.DUE_INDEX) is False


def test_at_most_one_analyze_a_minute(plan_tables: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planguard, "REANALYZE_SECONDS", 60.0)
    tables.analyzed_mid_load(tables.WORKING_SET)  # its own ANALYZE ran a moment ago
    assert planguard.keep_index(*pick(), table=tables.JOB, index=jobqueue.DUE_INDEX) is False
    assert pick_reads() != [jobqueue.DUE_INDEX]


@contextmanager
def analyze_lock_taken() -> Iterator[None]:
    """Another session holding the lock that ANALYZE needs (as a long manual VACUUM would)."""
    with psycopg.connect(dburl.build(connection.settings_dict)) as other:
        other.execute(f"LOCK TABLE {tables.JOB} IN SHARE UPDATE EXCLUSIVE MODE")
        try:
            yield
        finally:
            other.rollback()


def test_a_lock_it_cannot_get_makes_the_guard_give_up_not_the_claim(
    plan_tables: None, caplog: pytest.LogCaptureFixture
) -> None:
    tables.analyzed_mid_load(tables.WORKING_SET)

    with analyze_lock_taken(), caplog.at_level(logging.WARNING, logger="reliableq.planguard"):
        assert planguard.keep_index(*pick(), table=tables.JOB, index=jobqueue.DUE_INDEX) is False
        jobs, _ = jobqueue.claim(worker_id="w-plans", queues=("default",), limit=10, lease_seconds=30)

    assert len(jobs) == 10
    assert "could not analyze reliableq_job" in caplog.text
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
