"""The connection budget the deployment guide states, measured: what one worker process holds on the
server while its handlers (which touch no database) run long enough for the heartbeat to renew."""

from __future__ import annotations

import pytest
from django.db import connection

import reliableq
from reliableq.models import Job, JobStatus
from testproject import dburl
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NAME = "rq-budget"


def server_connections(query_like: str = "%") -> int:
    """The worker's connections as PostgreSQL counts them (pg_stat_activity, by application name)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s", [NAME, query_like]
        )
        return int(cursor.fetchone()[0])


def test_a_worker_holds_a_connection_for_its_loop_completer_heartbeat_and_listen(db_url, spawn_worker):
    db = dburl.parse(db_url)
    db["OPTIONS"] = {**db["OPTIONS"], "application_name": NAME}
    # Eight slots for four jobs: with slots free, the completer writes the ends on its own connection
    # (when every slot waits on them, the loop writes them itself and the completer opens none).
    spawn_worker("--concurrency", "8", env={"DATABASE_URL": dburl.build(db), "RELIABLEQ_LEASE_SECONDS": "1.5"})
    wait_until(lambda: server_connections("LISTEN%") == 1, timeout=30, what="the worker's LISTEN connection")

    # Four handlers of 2 s each, past several renewals (every 0.5 s): the heartbeat's connection is in use.
    jobs = [reliableq.enqueue("test.sleep", {"seconds": 2}) for _ in range(4)]
    peak = 0

    def all_done() -> bool:
        nonlocal peak
        peak = max(peak, server_connections())
        return Job.objects.filter(pk__in=[j.id for j in jobs], status=JobStatus.SUCCEEDED).count() == len(jobs)

    wait_until(all_done, timeout=30, interval=0.05, what="the four jobs to succeed")
    assert peak == 4  # the loop, the completer, the heartbeat, the listener; the handler threads hold none
