"""The guard analyzes the job table when a pick would leave its index, and only then."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection

from reliableq import leases, planguard
from testproject import dburl

from . import tables


def pick() -> tuple[str, tuple[object, ...]]:
    """The pick of a claim of 10 from "default", as leases.claim(rescue=True) has the guard check it."""
    return leases._picked_sql(("default",), 10, (), None)


def pick_reads() -> list[str]:
    return planguard.scans(planguard.plan_of(*pick()), tables.JOB)


def last_analyze() -> object:
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_analyze FROM pg_stat_user_tables WHERE relid = %s::regclass", [tables.JOB])
        return cursor.fetchone()[0]


def test_the_first_rescue_of_a_worker_repairs_statistics_that_hide_the_backlog(
    plan_tables: None, caplog: pytest.LogCaptureFixture
) -> None:
    tables.analyzed_mid_load(tables.WORKING_SET)  # 50,000 rows; the statistics say one
    assert pick_reads() != [leases.DUE_INDEX]

    with caplog.at_level(logging.WARNING, logger="reliableq.planguard"):
        jobs, rescued = leases.claim(worker_id="w-plans", queues=("default",), limit=10, lease_seconds=30)

    assert len(jobs) == 10 and rescued
    assert pick_reads() == [leases.DUE_INDEX]
    assert "statistics of reliableq_job look stale" in caplog.text


def test_right_statistics_are_left_alone(plan_tables: None) -> None:
    tables.analyzed_mid_load(tables.WORKING_SET)
    tables.analyze()
    analyzed = last_analyze()

    assert pick_reads() == [leases.DUE_INDEX]
    assert planguard.keep_index(*pick(), table=tables.JOB, index=leases.DUE_INDEX) is False
    assert last_analyze() == analyzed


def test_a_small_table_is_never_analyzed_for_its_plan(plan_tables: None) -> None:
    tables.truncate()
    tables.load(tables.WORKING_SET * 0.01)  # 500 rows: any plan reads a few pages
    assert planguard.keep_index(*pick(), table=tables.JOB, index=leases.DUE_INDEX) is False


def test_at_most_one_analyze_a_minute(plan_tables: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planguard, "REANALYZE_SECONDS", 60.0)
    tables.analyzed_mid_load(tables.WORKING_SET)  # its own ANALYZE ran a moment ago
    assert planguard.keep_index(*pick(), table=tables.JOB, index=leases.DUE_INDEX) is False
    assert pick_reads() != [leases.DUE_INDEX]


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
        jobs, _ = leases.claim(worker_id="w-plans", queues=("default",), limit=10, lease_seconds=30)

    assert len(jobs) == 10
    assert "could not analyze reliableq_job" in caplog.text
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
