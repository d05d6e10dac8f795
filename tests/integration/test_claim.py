"""claim: SKIP LOCKED over due rows, ordered, limited, and never the same job twice."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections import Counter

import psycopg
import pytest
from django.db.models.functions import Now

from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import db
from tests.factories import JobFactory

from .helpers import claim, claim_jobs, db_clock, db_now, spawn


def ago(seconds: float) -> Now:
    return Now() - dt.timedelta(seconds=seconds)


@pytest.mark.django_db
def test_claim_marks_the_job_running_under_a_fresh_lease_and_opens_attempt_one() -> None:
    job = JobFactory(kind="test.flaky", payload={"failures": 1}, max_attempts=4, queue="default", priority=2)
    start = db_now()
    [claimed] = claim_jobs(worker_id="w-a", lease_seconds=45)
    end = db_clock()

    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.RUNNING
    assert row.attempts == 1
    assert row.worker_id == "w-a"
    assert row.lease_token is not None and row.lease_token == claimed.lease_token
    # The lease runs from the database's clock, not the worker's.
    assert start + dt.timedelta(seconds=45) <= row.lease_expires_at <= end + dt.timedelta(seconds=45)

    [attempt] = Attempt.objects.filter(job=job)
    assert attempt.number == row.attempts == 1
    assert attempt.outcome == Outcome.RUNNING
    assert attempt.lease_token == row.lease_token
    assert attempt.worker_id == "w-a"
    assert attempt.finished_at is None
    assert start <= attempt.started_at <= end

    assert (claimed.id, claimed.kind, claimed.queue, claimed.priority) == (job.pk, "test.flaky", "default", 2)
    assert claimed.payload == {"failures": 1}
    assert (claimed.attempt, claimed.max_attempts, claimed.worker_id) == (1, 4, "w-a")
    assert claimed.idempotency_key == job.effect_key == f"reliableq:test.flaky:{job.pk}"


@pytest.mark.django_db
def test_each_claimed_job_gets_its_own_lease_token() -> None:
    JobFactory.create_batch(5)
    claimed = claim_jobs(limit=5)
    assert len({c.lease_token for c in claimed}) == 5


@pytest.mark.django_db
def test_claim_orders_by_priority_then_run_at_and_respects_the_limit() -> None:
    def job(name: str, priority: int, age: float) -> uuid.UUID:
        created = JobFactory(priority=priority, payload={"name": name})
        Job.objects.filter(pk=created.pk).update(run_at=ago(age))
        return created.pk

    low_old = job("low-old", 5, 500)
    urgent = job("urgent", -1, 10)
    p0_newer = job("p0-newer", 0, 20)
    p0_older = job("p0-older", 0, 300)
    lowest = job("lowest", 10, 1000)

    first = claim_jobs(limit=3)
    assert [c.id for c in first] == [urgent, p0_older, p0_newer]
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 2
    second = claim_jobs(limit=10)
    assert [c.id for c in second] == [low_old, lowest]
    assert claim_jobs(limit=10) == []


@pytest.mark.django_db
def test_claim_with_no_free_slot_takes_nothing() -> None:
    JobFactory()
    assert claim_jobs(limit=0) == []
    assert Job.objects.get().status == JobStatus.PENDING


@pytest.mark.django_db
def test_claim_takes_only_the_given_queues() -> None:
    mail = JobFactory(queue="mail")
    reports = JobFactory(queue="reports")
    JobFactory(queue="default")
    claimed = claim_jobs(queues=["mail", "reports"], limit=10)
    assert {c.id for c in claimed} == {mail.pk, reports.pk}
    assert {c.queue for c in claimed} == {"mail", "reports"}
    assert Job.objects.get(queue="default").status == JobStatus.PENDING


@pytest.mark.django_db
def test_jobs_not_yet_due_are_not_claimed() -> None:
    future = JobFactory()
    Job.objects.filter(pk=future.pk).update(run_at=Now() + dt.timedelta(minutes=5))
    soon = JobFactory()
    Job.objects.filter(pk=soon.pk).update(run_at=Now() + dt.timedelta(seconds=30))
    due = JobFactory()
    Job.objects.filter(pk=due.pk).update(run_at=ago(1))
    assert [c.id for c in claim_jobs(limit=10)] == [due.pk]
    assert Job.objects.get(pk=future.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=soon.pk).status == JobStatus.PENDING


@pytest.mark.django_db
@pytest.mark.parametrize("status", [JobStatus.DEAD, JobStatus.SUCCEEDED, JobStatus.CANCELLED])
def test_finished_jobs_are_never_claimed(status: str) -> None:
    job = JobFactory(status=status, attempts=2, last_error="earlier")
    Job.objects.filter(pk=job.pk).update(run_at=ago(3600), finished_at=ago(60))
    before = Job.objects.values().get(pk=job.pk)
    jobs, rescued = claim(limit=10)
    assert (jobs, rescued) == ([], [])
    assert Job.objects.values().get(pk=job.pk) == before
    assert not Attempt.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_claim_skips_rows_another_transaction_has_locked_and_takes_them_once_released(
    raw_conn: psycopg.Connection,
) -> None:
    jobs = JobFactory.create_batch(6)
    locked = {j.pk for j in jobs[:3]}
    free = {j.pk for j in jobs[3:]}
    # Connection 1 holds row locks on three due jobs in an open transaction.
    raw_conn.execute("SELECT id FROM reliableq_job WHERE id = ANY(%s) FOR UPDATE", (list(locked),))
    with db.cursor() as cursor:
        # If claim waited for those locks instead of skipping them, fail fast rather than hang.
        cursor.execute("SET lock_timeout = '3s'")
    try:
        first = claim_jobs(limit=10)
        assert {c.id for c in first} == free
        assert set(Job.objects.filter(status=JobStatus.PENDING).values_list("pk", flat=True)) == locked
        assert claim_jobs(limit=10) == []  # still locked: skipped again, not waited for
        raw_conn.rollback()
        second = claim_jobs(limit=10)
        assert {c.id for c in second} == locked
    finally:
        with db.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert Counter(Attempt.objects.values_list("job_id", flat=True)) == {pk: 1 for pk in locked | free}


@pytest.mark.django_db(transaction=True)
def test_claim_takes_locked_rows_after_the_other_transaction_commits(raw_conn: psycopg.Connection) -> None:
    a, b = JobFactory.create_batch(2)
    raw_conn.execute("SELECT id FROM reliableq_job WHERE id = %s FOR UPDATE", (a.pk,))
    assert [c.id for c in claim_jobs(limit=10)] == [b.pk]
    raw_conn.commit()
    assert [c.id for c in claim_jobs(limit=10)] == [a.pk]


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_claim_one_job_twice() -> None:
    total, workers = 400, 8
    Job.objects.bulk_create([Job(kind="demo.noop", payload={"n": n}) for n in range(total)])
    barrier = threading.Barrier(workers)

    def work(n: int) -> list[uuid.UUID]:
        mine: list[uuid.UUID] = []
        barrier.wait(timeout=30)
        while True:
            jobs, _ = claim(worker_id=f"w{n}", limit=7)
            if not jobs:
                return mine
            mine.extend(j.id for j in jobs)

    results = [f.result(timeout=120) for f in [spawn(work, n) for n in range(workers)]]
    claimed = [job_id for ids in results for job_id in ids]
    assert len(claimed) == len(set(claimed)) == total
    assert set(claimed) == set(Job.objects.values_list("pk", flat=True))
    assert sum(1 for ids in results if ids) > 1  # the claimers really competed
    # The database agrees: one attempt per job, owned by the worker that reported the claim.
    assert Attempt.objects.count() == total
    assert not Job.objects.exclude(status=JobStatus.RUNNING, attempts=1).exists()
    owner = {job_id: f"w{n}" for n, ids in enumerate(results) for job_id in ids}
    for job_id, number, worker_id in Attempt.objects.values_list("job_id", "number", "worker_id"):
        assert (number, worker_id) == (1, owner[job_id])
