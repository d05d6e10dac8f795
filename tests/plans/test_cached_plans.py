"""A plan a worker cached while a table was nearly empty is replaced once the table outgrows it.

A worker prepares its finish (reliableq.queue.db.run); after its first runs PostgreSQL keeps the
generic plan it made under the statistics of that moment. Made with the attempt table analyzed
empty, that plan scans every attempt for each job it finishes, however many attempts pile up,
until the table's statistics change. The guard's growth check (planguard.keep_up, run before
every rescue) analyzes a table that grew fourfold, and the scans stop.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from reliableq import queue as jobqueue
from reliableq.queue import planguard
from reliableq.queue.records import Finish

from . import tables


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
def cached_on_empty(plan_tables: None) -> None:
    """The finish's generic plan cached with the tables analyzed empty, then 20,000 finished jobs added."""
    tables.truncate()
    tables.analyze()
    tables.load(tables.Mix(due=400))
    for _ in range(8):  # PostgreSQL plans a prepared statement afresh five times, then keeps a generic plan
        finish_some()
    tables.load(tables.Mix(succeeded=20_000))


def test_a_plan_cached_on_an_empty_table_scans_it_until_the_guard_analyzes(cached_on_empty: None) -> None:
    assert finish_some() > 0  # what the fleet paid before the guard looked at sizes: a scan per job

    jobqueue.guard_claims(tables.QUEUES)

    assert finish_some() == 0
    assert finish_some() == 0


def test_growth_analyzes_once_per_fourfold(plan_tables: None) -> None:
    tables.truncate()
    tables.analyze()
    tables.load(tables.Mix(succeeded=20_000))

    assert sorted(planguard.keep_up([tables.JOB, tables.ATTEMPT])) == sorted([tables.JOB, tables.ATTEMPT])
    assert planguard.keep_up([tables.JOB, tables.ATTEMPT]) == []
    tables.load(tables.Mix(succeeded=20_000))  # twice the size: not yet fourfold
    assert planguard.keep_up([tables.JOB, tables.ATTEMPT]) == []


def test_a_small_table_is_never_analyzed_for_its_growth(plan_tables: None) -> None:
    tables.truncate()
    tables.analyze()
    tables.load(tables.Mix(succeeded=500))  # a few pages: any cached plan reads them quickly
    assert planguard.keep_up([tables.JOB, tables.ATTEMPT]) == []
