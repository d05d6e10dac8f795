"""A plan a worker cached while a table was nearly empty is replaced once the table outgrows it.

A worker prepares its finish (reliableq.queue.db.run); after its first runs PostgreSQL keeps the
generic plan it made under the statistics of that moment. Made with the attempt table analyzed
empty, that plan scans every attempt for each job it finishes, however many attempts pile up,
until the table's statistics change. The guard's growth check (planguard.keep_up, which the leader
runs before every rescue) analyzes a table whose committed rows grew fourfold, and the scans stop.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, transaction

from reliableq import queue as jobqueue
from reliableq.queue import planguard
from reliableq.queue.records import Finish
from testproject import dburl

from . import tables


def flush_stats() -> None:
    """Publish this session's row counts now (PostgreSQL does it at most once a second when idle)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def attempt_scans() -> int:
    """Sequential scans of the attempt table in this transaction so far (counted before any flush)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = %s", [tables.ATTEMPT])
        return int(cursor.fetchone()[0])


def finish_some() -> int:
    """Claim and finish 16 due jobs on this connection, as a worker does; the finish's scans of attempts."""
    with transaction.atomic():
        jobs, _ = jobqueue.claim(worker_id="w-plans", queues=tables.QUEUES, limit=16, lease_seconds=30, rescue=False)
        assert len(jobs) == 16
        before = attempt_scans()
        ended = [Finish(job_id=j.id, lease_token=j.lease_token, status="SUCCEEDED", outcome="SUCCEEDED") for j in jobs]
        assert len(jobqueue.finish(ended).finalized) == 16
        return attempt_scans() - before


@pytest.fixture
def cached_on_empty(plan_tables: None) -> Iterator[None]:
    """The finish's generic plan cached with the tables analyzed empty, then 20,000 finished jobs added.

    The connection is closed afterwards: the plans it cached here must not reach the next test's.
    """
    tables.truncate()
    tables.analyze()
    tables.load(tables.Mix(due=400))
    for _ in range(8):  # PostgreSQL plans a prepared statement afresh five times, then keeps a generic plan
        finish_some()
    tables.load(tables.Mix(succeeded=20_000))
    flush_stats()
    yield
    connection.close()


def test_a_plan_cached_on_an_empty_table_scans_it_until_the_guard_analyzes(cached_on_empty: None) -> None:
    assert finish_some() > 0  # what the fleet paid before the guard looked at sizes: a scan per job

    jobqueue.guard_tables()  # the leader's, before guard_claims (worker.store.DatabaseStore)

    assert finish_some() == 0
    assert finish_some() == 0


def test_growth_analyzes_once_per_fourfold(plan_tables: None) -> None:
    tables.truncate()
    tables.analyze()
    tables.load(tables.Mix(succeeded=20_000))
    flush_stats()

    assert sorted(planguard.keep_up([tables.JOB, tables.ATTEMPT])) == sorted([tables.JOB, tables.ATTEMPT])
    assert planguard.keep_up([tables.JOB, tables.ATTEMPT]) == []
    tables.load(tables.Mix(succeeded=20_000))  # twice the size: not yet fourfold
    flush_stats()
    assert planguard.keep_up([tables.JOB, tables.ATTEMPT]) == []


def test_a_load_is_not_analyzed_before_it_commits(plan_tables: None) -> None:
    # An ANALYZE now would see the load's pages and none of its rows: statistics of an empty table
    # of thousands of pages, which no growth would repair until it quadrupled again.
    tables.truncate()
    tables.analyze()
    with psycopg.connect(dburl.build(connection.settings_dict)) as loader:
        loader.execute(
            f"INSERT INTO {tables.JOB} (id, kind, queue, priority, payload, max_attempts, last_error, dedupe_scope,"
            " created_at, updated_at, status, attempts, worker_id, run_at)"
            " SELECT gen_random_uuid(), %s, 'default', 0, '{}', 5, '', '', now(), now(), 'PENDING', 0, '', now()"
            " FROM generate_series(1, 30000)",
            [tables.KIND],
        )
        assert planguard.keep_up([tables.JOB]) == []  # uncommitted: thousands of pages, no rows yet
        loader.execute("SELECT pg_stat_force_next_flush()")
        loader.commit()
        loader.execute("SELECT 1")  # idle after a transaction: the count is published
        loader.commit()

    assert planguard.keep_up([tables.JOB]) == [tables.JOB]
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [tables.JOB])
        assert cursor.fetchone()[0] == pytest.approx(30_000, rel=0.1)


def test_a_small_table_is_never_analyzed_for_its_growth(plan_tables: None) -> None:
    tables.truncate()
    tables.analyze()
    tables.load(tables.Mix(succeeded=500))  # a few pages: any cached plan reads them quickly
    flush_stats()
    assert planguard.keep_up([tables.JOB, tables.ATTEMPT]) == []
