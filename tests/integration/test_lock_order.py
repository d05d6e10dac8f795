"""A worker's heartbeat and its completer write the same jobs on two connections at once: the
renewal of every held lease and the finish of a batch. They must not wait for each other in a
cycle, or PostgreSQL aborts one of them. The renewal never waits for a row at all: it renews what
it can lock and leaves a busy row to the next beat. The finish locks its jobs by id, whatever
order it is given them in.

Shown by a third session holding the higher row: a finish that locks by id has already locked
the lower row when it waits, so the lower row is busy; one that went in the given order waits
before touching it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connections

import reliableq
from reliableq import queue as jobqueue
from reliableq.models import Job, JobStatus, Outcome
from reliableq.queue import Finish, db
from testproject import dburl
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def two_claimed() -> tuple[Any, Any]:
    for n in range(2):
        reliableq.enqueue("demo.noop", {"n": n}, queue="lock-order")
    jobs, _ = jobqueue.claim(worker_id="w-order", queues=("lock-order",), limit=2, lease_seconds=30, rescue=False)
    low, high = sorted(jobs, key=lambda job: job.id)
    return low, high


def busy(job_id: uuid.UUID) -> bool:
    with psycopg.connect(dburl.build(db.connection().settings_dict), autocommit=True) as probe:
        try:
            probe.execute("SELECT 1 FROM reliableq_job WHERE id = %s FOR UPDATE NOWAIT", (job_id,))
        except psycopg.errors.LockNotAvailable:
            return True
    return False


def locks_the_lower_row_first(write: Callable[[], Any], high: Any, low: Any) -> None:
    with psycopg.connect(dburl.build(db.connection().settings_dict)) as holder:
        holder.execute("SELECT 1 FROM reliableq_job WHERE id = %s FOR UPDATE", (high.id,))
        done = threading.Event()

        def run() -> None:
            try:
                write()
            finally:
                connections.close_all()
                done.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        with psycopg.connect(dburl.build(db.connection().settings_dict), autocommit=True) as watch:
            wait_until(
                lambda: (
                    watch.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND pid <> %s",
                        (holder.info.backend_pid,),
                    ).fetchone()[0]  # type: ignore[index]
                    == 1
                ),
                timeout=10,
                what="the write to wait for the held row",
            )
        assert busy(low.id), "the write waited for the higher row before it locked the lower one"
        holder.rollback()
        assert done.wait(10)


@pytest.mark.parametrize("runs", [1, 7], ids=["custom plan", "generic plan"])
def test_a_renewal_never_waits_for_a_held_row_and_leaves_it_to_the_next_beat(runs: int) -> None:
    low, high = two_claimed()
    held = [(high.id, high.lease_token), (low.id, low.lease_token)]
    for _ in range(runs - 1):  # a prepared statement goes generic after five runs
        jobqueue.renew(held, lease_seconds=30)
    expiry = lambda job: Job.objects.get(pk=job.id).lease_expires_at  # noqa: E731
    before = {job.id: expiry(job) for job in (low, high)}
    with psycopg.connect(dburl.build(db.connection().settings_dict)) as holder:
        holder.execute("SELECT 1 FROM reliableq_job WHERE id = %s FOR UPDATE", (high.id,))
        with db.cursor() as cursor:  # a renewal that waited would fail here, not hang
            cursor.execute("SET lock_timeout = '5s'")
        try:
            renewed = jobqueue.renew(held, lease_seconds=60)
        finally:
            with db.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        assert renewed == {low.id: False, high.id: False}, "the held row is still ours, not lost"
        assert expiry(low) > before[low.id] and expiry(high) == before[high.id]
        holder.rollback()
    assert jobqueue.renew(held, lease_seconds=90) == {low.id: False, high.id: False}
    assert expiry(high) > before[high.id]


def test_a_job_gone_from_the_table_is_not_reported_as_held() -> None:
    low, high = two_claimed()
    Job.objects.filter(pk=high.id).delete()
    assert jobqueue.renew([(high.id, high.lease_token), (low.id, low.lease_token)], lease_seconds=30) == {low.id: False}


@pytest.mark.parametrize("runs", [1, 7], ids=["custom plan", "generic plan"])
def test_a_finish_locks_its_jobs_by_id_whatever_order_it_is_given(runs: int) -> None:
    for _ in range(runs - 1):
        stale = two_claimed()
        jobqueue.finish([succeeded(job) for job in reversed(stale)])
    low, high = two_claimed()
    locks_the_lower_row_first(lambda: jobqueue.finish([succeeded(high), succeeded(low)]), high, low)


def succeeded(job: Any) -> Finish:
    return Finish(job_id=job.id, lease_token=job.lease_token, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)
