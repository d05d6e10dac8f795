"""Many worker processes claiming from one queue at once never take one job twice."""

from __future__ import annotations

import collections
import datetime as dt
import re
import uuid

import pytest
from django.db.models.functions import Now

import reliableq
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import db
from tests.support import wait_until

from .helpers import attempts, db_now

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLAIMED = re.compile(r"job=(\S+) kind=demo\.noop attempt=\d+/\d+ token=\S+ claimed")
JOBS, WORKERS = 300, 4


def test_concurrent_worker_processes_never_claim_one_job_twice(spawn_worker):
    # A RUNNING job under a live-looking lease keeps the --burst workers from exiting until all
    # of them are up and polling, so the 300 jobs below land on four claimers at once.
    token = uuid.uuid4()
    barrier = Job.objects.create(
        kind="demo.noop",
        status=JobStatus.RUNNING,
        attempts=1,
        lease_token=token,
        worker_id="w-barrier",
        lease_expires_at=db_now() + dt.timedelta(seconds=60),
    )
    Attempt.objects.create(job=barrier, number=1, worker_id="w-barrier", lease_token=token, outcome=Outcome.RUNNING)
    # At DEBUG, each claim is a log line (below): the workers' own view of what they took.
    workers = [
        spawn_worker("--burst", "--concurrency", "4", "--lease-seconds", "5", env={"RELIABLEQ_LOG_LEVEL": "DEBUG"})
        for _ in range(WORKERS)
    ]
    for w in workers:
        w.wait_for_output("started", timeout=20)

    with db.atomic():
        ids = {reliableq.enqueue("demo.noop", {"n": n}).id for n in range(JOBS)}
    wait_until(
        lambda: Job.objects.filter(id__in=ids, status=JobStatus.SUCCEEDED).count() == JOBS,
        timeout=60,
        interval=0.2,
        what="all 300 jobs to succeed",
    )
    # The barrier's owner "dies": its lease runs out, one worker recovers it, then all go idle.
    Job.objects.filter(pk=barrier.pk).update(lease_expires_at=Now())
    for w in workers:
        assert w.wait(timeout=30) == 0, w.output()

    jobs = Job.objects.filter(id__in=ids)
    assert set(jobs.values_list("status", "attempts")) == {(JobStatus.SUCCEEDED, 1)}
    rows = list(Attempt.objects.filter(job_id__in=ids).values_list("job_id", "worker_id", "lease_token", "outcome"))
    assert len(rows) == JOBS
    assert len({job_id for job_id, *_ in rows}) == JOBS, "some job has two attempts"
    assert len({t for _, _, t, _ in rows}) == JOBS, "two attempts share a lease token"
    assert {o for *_, o in rows} == {Outcome.SUCCEEDED}
    owner = dict(jobs.values_list("id", "worker_id"))
    assert all(owner[job_id] == worker_id for job_id, worker_id, _, _ in rows)

    # The workers' own view: no job id appears in two claim log lines, across all processes.
    claims = collections.Counter()
    per_worker = {}
    for w in workers:
        seen = [uuid.UUID(m) for m in CLAIMED.findall(w.output())]
        per_worker[w.args[-1]] = len(seen)
        claims.update(seen)
    doubles = [job_id for job_id, n in claims.items() if n > 1]
    assert not doubles, f"claimed twice: {doubles[:5]}"
    assert set(claims) == ids | {barrier.id}
    assert sum(1 for n in per_worker.values() if n) >= 2, f"no contention happened: {per_worker}"

    # The barrier was recovered exactly once.
    first, second = attempts(barrier.id)
    assert first.outcome == Outcome.LEASE_EXPIRED and second.outcome == Outcome.SUCCEEDED
