"""A worker whose default database cannot be reached at all runs the queue on the queue's own database:
claims, a retry, DEAD, the leader's rescue, LISTEN. Needs the queue on its own alias (CI's second pass,
QUEUE_DATABASE_URL=embedded)."""

from __future__ import annotations

import pytest

import reliableq
from reliableq import queue as jobqueue
from reliableq.models import JobStatus, Outcome
from reliableq.queue import db

from ..integration.helpers import expire
from .helpers import attempts, job

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(db.alias() == "default", reason="the queue is on the default database"),
]

UNREACHABLE = "postgres://nobody@127.0.0.1:9/unreachable"  # the discard port: every connection is refused


def test_a_worker_needs_only_the_queues_database(spawn_worker):
    done = [reliableq.enqueue("demo.noop", {"n": n}) for n in range(3)]
    flaky = reliableq.enqueue("test.flaky", {"failures": 1})
    dead = reliableq.enqueue("test.permanent", {})
    reliableq.enqueue("demo.noop", {}, queue="abandoned")
    [held], _ = jobqueue.claim(worker_id="gone", queues=["abandoned"], limit=1, lease_seconds=30)
    expire(held.id)
    worker = spawn_worker("--burst", "--queues", "default,abandoned", env={"DATABASE_URL": UNREACHABLE})
    assert worker.wait(timeout=30) == 0, worker.output()
    output = worker.output()
    assert "probe heard" in output, output
    # The handlers' own failures are logged with their tracebacks; nothing of the worker's own is.
    assert output.count("Traceback") == output.count("failed_transient, retry") + output.count(" dead ("), output
    assert "executor crashed" not in output and "database error" not in output, output
    assert {job(j.id).status for j in done} == {JobStatus.SUCCEEDED}
    # Failed once, then retried after its backoff: within the burst, or still waiting past its end.
    assert attempts(flaky.id)[0].outcome == Outcome.FAILED_TRANSIENT
    assert job(flaky.id).status in (JobStatus.PENDING, JobStatus.SUCCEEDED)
    assert job(dead.id).status == JobStatus.DEAD
    assert job(held.id).status == JobStatus.SUCCEEDED  # taken back from "gone" by the leader's rescue
