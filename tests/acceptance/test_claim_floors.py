"""A real worker's claim floor never loses a job: one committed behind it is run by the next sweep.

The floor (reliableq.floors) lets a worker's claims skip the rows it already took. A job whose
enqueue transaction began well before it committed has a run_at older than what the worker has
been claiming meanwhile: it lands behind the floor. The worker's periodic sweep must find it.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

import reliableq
from reliableq.floors import FLOOR_SLACK_SECONDS, FLOOR_SWEEP_SECONDS
from reliableq.models import Job, JobStatus
from tests.support import wait_until

from .helpers import db_now

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_job_committed_behind_a_busy_workers_floor_still_runs(spawn_worker):
    spawn_worker("--concurrency", "4")
    opened, commit = threading.Event(), threading.Event()
    made: dict[str, object] = {}

    def long_enqueue() -> None:  # one transaction: the job's run_at is the transaction's start
        try:
            with transaction.atomic():
                made["job"] = reliableq.enqueue("demo.noop", {"late": True})
                opened.set()
                commit.wait(timeout=60)
        finally:
            connections.close_all()

    thread = threading.Thread(target=long_enqueue, daemon=True)
    thread.start()
    assert opened.wait(timeout=30)
    started = db_now()
    # Meanwhile the worker claims jobs due later than the open transaction's job: its floor moves past it.
    for n in range(5):
        reliableq.enqueue("demo.noop", {"n": n})
        wait_until(
            lambda: not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists(),
            timeout=30,
            what="the committed jobs to run",
        )
    wait_until(
        lambda: (db_now() - started).total_seconds() > 2 * FLOOR_SLACK_SECONDS,
        timeout=30,
        interval=0.1,
        what="the floor to pass the open transaction's run_at",
    )
    reliableq.enqueue("demo.noop", {"n": "last"})  # claimed at once: the floor is now past the late job
    wait_until(lambda: Job.objects.filter(payload__n="last", status=JobStatus.SUCCEEDED).exists(), timeout=30,
               what="the last committed job to run")  # fmt: skip

    commit.set()
    thread.join(timeout=30)
    late = made["job"]
    # Found by a sweep: within FLOOR_SWEEP_SECONDS of the commit, plus the worker's poll.
    wait_until(
        lambda: Job.objects.filter(pk=late.pk, status=JobStatus.SUCCEEDED).exists(),  # type: ignore[attr-defined]
        timeout=FLOOR_SWEEP_SECONDS + 15,
        what="the job committed behind the floor to run",
    )
