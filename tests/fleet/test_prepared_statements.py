"""The worker's hot statements are prepared once per direct connection, and never through a pooler
in transaction mode, where a prepared statement belongs to a server connection, not to the client."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

import reliableq
from bench import pgbouncer
from reliableq import queue as jobqueue
from reliableq.models import Job, JobStatus, Outcome
from reliableq.queue import Finish, db
from testproject import dburl
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def prepared() -> dict[str, int]:
    """This session's protocol-level prepared statements: their text, and how often each was run."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements WHERE NOT from_sql")
        return dict(cursor.fetchall())


def test_a_direct_connection_prepares_the_claim_and_the_finish_once_and_runs_them_again() -> None:
    for n in range(6):
        reliableq.enqueue("demo.noop", {"n": n})
    for _ in range(6):
        [job], _ = jobqueue.claim(worker_id="w-prep", queues=("default",), limit=1, lease_seconds=30, rescue=False)
        jobqueue.finish(
            [Finish(job_id=job.id, lease_token=job.lease_token, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)]
        )

    statements = prepared()
    claims = [runs for sql, runs in statements.items() if sql.startswith("/* reliableq:claim */")]
    finishes = [runs for sql, runs in statements.items() if sql.startswith("/* reliableq:finish_jobs */")]
    assert claims == [6] and finishes == [6], statements
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 6


def test_through_pgbouncer_a_prepared_statement_meets_another_clients_so_nothing_is_prepared() -> None:
    if not pgbouncer.available():
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    with pgbouncer.PgBouncer.start(connection.settings_dict, pool_size=1) as bouncer:
        # The hazard: two clients, one server connection, psycopg's names (_pg3_0, ...) in both.
        with (
            psycopg.connect(bouncer.url, autocommit=True, prepare_threshold=0) as first,
            psycopg.connect(bouncer.url, autocommit=True, prepare_threshold=0) as second,
        ):
            first.execute("SELECT 1", prepare=True)
            with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
                second.execute("SELECT 2", prepare=True)
            # What db.run() asks of each connection before it prepares anything.
            assert not db._may_prepare(first)
        with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True, prepare_threshold=None) as direct:
            assert db._may_prepare(direct)


@pytest.mark.slow
def test_workers_behind_a_one_connection_pooler_run_every_job_without_a_prepared_statement_error(spawn_worker):
    if not pgbouncer.available():
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    with pgbouncer.PgBouncer.start(connection.settings_dict, pool_size=1) as bouncer:
        for n in range(200):
            reliableq.enqueue("demo.noop", {"n": n})
        workers = [
            spawn_worker("--concurrency", "8", env={"DATABASE_URL": bouncer.url, "RELIABLEQ_POLL_SECONDS": "0.2"})
            for _ in range(2)
        ]
        wait_until(
            lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 200, timeout=90, what="every job to run"
        )
        for worker in workers:
            assert "prepared statement" not in worker.output()
