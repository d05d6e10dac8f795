"""Workers behind PgBouncer in transaction mode: LISTEN through the pooler hears nothing, and the
worker says so and polls; LISTEN on a direct connection (LISTEN_DATABASE) wakes it at once."""

from __future__ import annotations

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEAF = "does not hear a NOTIFY"


def start_delay(job: Job) -> float:
    """Seconds from the job's INSERT to its first attempt's start, both by database time."""
    attempt = Attempt.objects.get(job=job, number=1)
    return (attempt.started_at - job.created_at).total_seconds()


def test_listen_through_a_transaction_pooler_is_reported_and_the_worker_polls(bouncer, spawn_worker):
    worker = spawn_worker(env={"DATABASE_URL": bouncer.url, "RELIABLEQ_POLL_SECONDS": "0.5"})
    worker.wait_for_output(DEAF, timeout=30)
    assert "RELIABLEQ['LISTEN_DATABASE']" in worker.output()

    job = reliableq.enqueue("demo.noop", {})
    wait_until(lambda: Job.objects.get(pk=job.id).status == JobStatus.SUCCEEDED, timeout=30, what="the job to run")
    assert bouncer.server_connections() <= 4


def test_listen_on_a_direct_connection_wakes_a_worker_behind_the_pooler_at_once(bouncer, spawn_worker, db_url):
    worker = spawn_worker(
        env={
            "DATABASE_URL": bouncer.url,
            "LISTEN_DATABASE_URL": db_url,
            "RELIABLEQ_LISTEN_DATABASE": "direct",
            "RELIABLEQ_POLL_SECONDS": "30",  # a wake-up faster than this can only be the notification
        }
    )
    worker.wait_for_output(" started: ", timeout=30)
    wait_until(
        lambda: "listening" in worker.output() or DEAF in worker.output(), timeout=15, what="the listener's probe"
    )
    assert DEAF not in worker.output()

    job = reliableq.enqueue("demo.noop", {})
    wait_until(lambda: Job.objects.get(pk=job.id).status == JobStatus.SUCCEEDED, timeout=20, what="the job to run")
    assert start_delay(Job.objects.get(pk=job.id)) < 5.0
