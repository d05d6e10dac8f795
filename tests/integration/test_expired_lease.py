"""Recovery: a RUNNING job whose lease ran out is taken back by the next claim, or buried."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.functions import Now

from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import Rescued
from tests.factories import RunningJobFactory

from .helpers import claim, db_clock, db_now, expire


@pytest.mark.django_db
def test_expired_lease_is_reclaimed_by_the_next_claim_as_attempt_two() -> None:
    job = RunningJobFactory(worker_id="w-old")
    old_token = job.lease_token
    expire(job.pk)
    start = db_now()

    jobs, rescued = claim(worker_id="w-new")
    end = db_clock()

    assert rescued == [Rescued(job.pk, 1, JobStatus.PENDING, "w-old")]
    [again] = jobs
    assert again.id == job.pk
    assert again.attempt == 2
    assert again.lease_token != old_token

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.worker_id, row.lease_token) == (
        JobStatus.RUNNING,
        2,
        "w-new",
        again.lease_token,
    )
    assert "lease of attempt 1/5 expired: worker w-old stopped renewing it" in row.last_error

    first, second = Attempt.objects.filter(job=job).order_by("number")
    assert (first.number, first.outcome, first.lease_token) == (1, Outcome.LEASE_EXPIRED, old_token)
    assert first.finished_at is not None and start <= first.finished_at <= end
    assert "w-old" in first.error
    assert (second.number, second.outcome, second.lease_token, second.worker_id) == (
        2,
        Outcome.RUNNING,
        again.lease_token,
        "w-new",
    )
    assert second.finished_at is None


@pytest.mark.django_db
def test_running_job_with_a_live_lease_is_not_reclaimed() -> None:
    job = RunningJobFactory()
    Job.objects.filter(pk=job.pk).update(lease_expires_at=Now() + dt.timedelta(seconds=30))
    before = Job.objects.values().get(pk=job.pk)

    assert claim(worker_id="w-new") == ([], [])

    assert Job.objects.values().get(pk=job.pk) == before
    [attempt] = Attempt.objects.filter(job=job)
    assert (attempt.outcome, attempt.finished_at) == (Outcome.RUNNING, None)


@pytest.mark.django_db
def test_expired_job_with_no_attempts_left_goes_dead_instead_of_running_again() -> None:
    job = RunningJobFactory(attempts=3, max_attempts=3, payload={"keep": "me"}, worker_id="w-old")
    expire(job.pk)
    start = db_now()

    jobs, rescued = claim(worker_id="w-new")

    assert jobs == []
    assert rescued == [Rescued(job.pk, 3, JobStatus.DEAD, "w-old")]
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.DEAD
    assert row.attempts == 3
    assert row.finished_at is not None and row.finished_at >= start
    assert row.lease_token is None and row.lease_expires_at is None
    assert row.payload == {"keep": "me"}
    assert "no attempts left" in row.last_error
    [attempt] = Attempt.objects.filter(job=job)
    assert attempt.outcome == Outcome.LEASE_EXPIRED
    assert attempt.finished_at is not None
    # DEAD is final until a person replays it.
    assert claim(worker_id="w-later") == ([], [])


@pytest.mark.django_db
def test_expired_job_in_another_queue_is_left_to_that_queues_workers() -> None:
    job = RunningJobFactory(queue="reports")
    expire(job.pk)
    assert claim(queues=["default"]) == ([], [])
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    jobs, rescued = claim(queues=["reports"])
    assert [j.id for j in jobs] == [job.pk] and len(rescued) == 1


@pytest.mark.django_db
def test_several_expired_jobs_are_rescued_in_one_claim_and_sized_to_the_limit() -> None:
    stale = RunningJobFactory.create_batch(4)
    for job in stale:
        expire(job.pk)
    jobs, rescued = claim(limit=2)
    # Every expired lease is closed, but only as many jobs as there are free slots run again.
    assert {r.job_id for r in rescued} == {j.pk for j in stale}
    assert len(jobs) == 2 and all(j.attempt == 2 for j in jobs)
    assert Attempt.objects.filter(outcome=Outcome.LEASE_EXPIRED).count() == 4
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 2
