"""Token fencing: a worker whose lease was taken back changes nothing; the current owner's finish works."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.test.utils import CaptureQueriesContext

from reliableq import queue as jobqueue
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import ClaimedJob, Finish, db
from reliableq.worker import executor
from tests.factories import JobFactory, RunningJobFactory

from .helpers import claim_jobs, db_clock, db_now, expire, make_due


def taken_over(**factory_kwargs: object) -> tuple[Job, uuid.UUID, ClaimedJob]:
    """A job whose first owner's lease expired and was claimed again: (job, stale token, new claim)."""
    job = RunningJobFactory(worker_id="w-stale", **factory_kwargs)
    expire(job.pk)
    [current] = claim_jobs(worker_id="w-current")
    assert current.id == job.pk and current.lease_token != job.lease_token
    return job, job.lease_token, current


def snapshot(job_id: uuid.UUID) -> dict:
    return Job.objects.values().get(pk=job_id)


def updates(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("UPDATE", "WITH", "/*"))
    ]


@pytest.mark.django_db
def test_stale_token_cannot_renew() -> None:
    job, stale, current = taken_over()
    before = snapshot(job.pk)
    assert jobqueue.renew([(job.pk, stale)], lease_seconds=600) == {}
    assert snapshot(job.pk) == before  # lease_expires_at unchanged
    assert jobqueue.renew([(job.pk, current.lease_token)], lease_seconds=600) == {job.pk: False}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "outcome", "delay"),
    [
        (JobStatus.SUCCEEDED, Outcome.SUCCEEDED, 0.0),
        (JobStatus.PENDING, Outcome.FAILED_TRANSIENT, 5.0),
        (JobStatus.DEAD, Outcome.FAILED_PERMANENT, 0.0),
    ],
    ids=["finalize", "retry", "bury"],
)
def test_stale_token_cannot_finish(status: str, outcome: str, delay: float) -> None:
    job, stale, current = taken_over()
    before = snapshot(job.pk)
    expired_attempt = Attempt.objects.values().get(job=job, number=1)

    result = jobqueue.finish(
        [Finish(job_id=job.pk, lease_token=stale, status=status, outcome=outcome, error="stale says so", delay=delay)]
    )

    assert result.finalized == []
    assert result.lost == [job.pk]
    after = snapshot(job.pk)
    assert after == before
    assert (after["status"], after["lease_token"], after["worker_id"]) == (
        JobStatus.RUNNING,
        current.lease_token,
        "w-current",
    )
    # The stale attempt was already closed as LEASE_EXPIRED by the rescue: left exactly as it was.
    assert Attempt.objects.values().get(job=job, number=1) == expired_attempt
    second = Attempt.objects.get(job=job, number=2)
    assert (second.outcome, second.finished_at, second.error) == (Outcome.RUNNING, None, "")


@pytest.mark.django_db
def test_stale_attempt_still_running_is_marked_lease_lost() -> None:
    # The owner's attempt is still open, but the job has moved to another token.
    job = RunningJobFactory(worker_id="w-stale")
    stale = job.lease_token
    other = uuid.uuid4()
    Job.objects.filter(pk=job.pk).update(lease_token=other, worker_id="w-other")
    before = snapshot(job.pk)
    start = db_now()

    result = jobqueue.finish(
        [Finish(job_id=job.pk, lease_token=stale, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)]
    )

    assert result.lost == [job.pk] and result.finalized == []
    assert snapshot(job.pk) == before
    attempt = Attempt.objects.get(job=job, number=1)
    assert attempt.outcome == Outcome.LEASE_LOST
    assert attempt.finished_at is not None and attempt.finished_at >= start
    assert "lease lost before finalize" in attempt.error


@pytest.mark.django_db
def test_stale_token_cannot_touch_a_job_the_new_owner_already_finished() -> None:
    job, stale, current = taken_over()
    jobqueue.finish(
        [Finish(job_id=job.pk, lease_token=current.lease_token, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)]
    )
    before = snapshot(job.pk)
    attempts_before = list(Attempt.objects.filter(job=job).values())

    result = jobqueue.finish(
        [Finish(job_id=job.pk, lease_token=stale, status=JobStatus.PENDING, outcome=Outcome.FAILED_TRANSIENT)]
    )

    assert result.lost == [job.pk]
    assert snapshot(job.pk) == before
    assert snapshot(job.pk)["status"] == JobStatus.SUCCEEDED
    assert list(Attempt.objects.filter(job=job).values()) == attempts_before


@pytest.mark.django_db
def test_current_token_finalizes_the_job() -> None:
    job = JobFactory()
    [claimed] = claim_jobs()
    start = db_now()

    result = jobqueue.finish(
        [Finish(job_id=job.pk, lease_token=claimed.lease_token, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)]
    )

    assert (result.finalized, result.lost) == ([job.pk], [])
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.SUCCEEDED
    assert row.lease_token is None and row.lease_expires_at is None
    assert row.finished_at is not None and row.finished_at >= start
    attempt = Attempt.objects.get(job=job)
    assert attempt.outcome == Outcome.SUCCEEDED
    assert attempt.finished_at is not None


@pytest.mark.django_db
def test_finish_writes_many_jobs_in_one_call_with_mixed_outcomes() -> None:
    lost_job, stale, _ = taken_over()
    ok, retry, dead = JobFactory(), JobFactory(), JobFactory()
    claimed = {c.id: c for c in claim_jobs(limit=10)}
    assert set(claimed) == {ok.pk, retry.pk, dead.pk}

    def fin(job: Job, status: str, outcome: str, **kw: object) -> Finish:
        return Finish(job_id=job.pk, lease_token=claimed[job.pk].lease_token, status=status, outcome=outcome, **kw)

    finishes = [
        fin(ok, JobStatus.SUCCEEDED, Outcome.SUCCEEDED),
        fin(retry, JobStatus.PENDING, Outcome.FAILED_TRANSIENT, error="503 from provider", delay=30.0),
        fin(dead, JobStatus.DEAD, Outcome.FAILED_PERMANENT, error="user 7 no longer exists"),
        Finish(job_id=lost_job.pk, lease_token=stale, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED),
    ]
    result = jobqueue.finish(finishes)

    assert result.finalized == [ok.pk, retry.pk, dead.pk]
    assert result.lost == [lost_job.pk]
    rows = {j.pk: j for j in Job.objects.all()}
    assert rows[ok.pk].status == JobStatus.SUCCEEDED
    assert rows[retry.pk].status == JobStatus.PENDING and rows[retry.pk].last_error == "503 from provider"
    assert rows[dead.pk].status == JobStatus.DEAD and rows[dead.pk].last_error == "user 7 no longer exists"
    assert rows[lost_job.pk].status == JobStatus.RUNNING
    outcomes = dict(Attempt.objects.filter(job_id__in=[ok.pk, retry.pk, dead.pk]).values_list("job_id", "outcome"))
    assert outcomes == {ok.pk: Outcome.SUCCEEDED, retry.pk: Outcome.FAILED_TRANSIENT, dead.pk: Outcome.FAILED_PERMANENT}


@pytest.mark.django_db
def test_finish_of_a_batch_is_one_fenced_statement() -> None:
    JobFactory.create_batch(5)
    claimed = claim_jobs(limit=5)
    with CaptureQueriesContext(db.connection()) as queries:
        result = jobqueue.finish(
            [
                Finish(job_id=c.id, lease_token=c.lease_token, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)
                for c in claimed
            ]
        )
    assert len(result.finalized) == 5
    assert len(updates(queries)) == 1
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 5


@pytest.mark.django_db
def test_retry_persists_run_at_from_database_time_and_clears_the_lease() -> None:
    job = JobFactory()
    [claimed] = claim_jobs()
    start = db_now()

    jobqueue.finish(
        [
            Finish(
                job_id=job.pk,
                lease_token=claimed.lease_token,
                status=JobStatus.PENDING,
                outcome=Outcome.FAILED_TRANSIENT,
                error="timeout talking to provider",
                delay=90.5,
            )
        ]
    )
    end = db_clock()

    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING
    delay = dt.timedelta(seconds=90.5)
    assert start + delay - dt.timedelta(seconds=0.01) <= row.run_at <= end + delay
    assert row.lease_token is None and row.lease_expires_at is None
    assert row.finished_at is None
    assert row.attempts == 1  # counted at claim, not at finish
    assert row.last_error == "timeout talking to provider"
    attempt = Attempt.objects.get(job=job)
    assert (attempt.outcome, attempt.error) == (Outcome.FAILED_TRANSIENT, "timeout talking to provider")
    assert attempt.finished_at is not None
    # Not due until its run_at: no worker takes it early.
    assert claim_jobs() == []
    make_due(job.pk)
    [again] = claim_jobs()
    assert (again.id, again.attempt) == (job.pk, 2)


@pytest.mark.django_db
def test_dead_keeps_payload_sanitized_error_and_all_attempts() -> None:
    job = JobFactory(kind="test.flaky", payload={"failures": 9, "note": "keep"}, max_attempts=3)
    for _ in range(3):
        make_due(job.pk)
        [claimed] = claim_jobs()
        result = executor.run_attempt(claimed)  # the real handler raises TransientError
        assert jobqueue.finish([result.finish]).finalized == [job.pk]

    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.DEAD
    assert row.payload == {"failures": 9, "note": "keep"}
    assert row.attempts == 3
    assert row.finished_at is not None and row.lease_token is None
    assert row.last_error.startswith("TransientError: attempt 3 failed on purpose")
    attempts = list(Attempt.objects.filter(job=job).order_by("number").values_list("number", "outcome"))
    assert attempts == [(1, Outcome.FAILED_TRANSIENT), (2, Outcome.FAILED_TRANSIENT), (3, Outcome.FAILED_TRANSIENT)]


@pytest.mark.django_db
def test_permanent_error_goes_dead_at_once_with_its_secret_redacted() -> None:
    job = JobFactory(kind="test.permanent", payload={"user": 7})
    [claimed] = claim_jobs()
    result = executor.run_attempt(claimed)
    assert jobqueue.finish([result.finish]).finalized == [job.pk]

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.payload) == (JobStatus.DEAD, 1, {"user": 7})
    assert row.last_error.startswith("PermanentError: the input can never be valid: password=[redacted]")
    assert "hunter2" not in row.last_error
    attempt = Attempt.objects.get(job=job)
    assert attempt.outcome == Outcome.FAILED_PERMANENT
    assert "hunter2" not in attempt.error and attempt.error == row.last_error
