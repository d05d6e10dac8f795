"""Operator actions: replay a DEAD job (same id, history kept), cancel a PENDING one."""

from __future__ import annotations

import uuid

import pytest

from reliableq import queue as jobqueue
from reliableq import services
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import Finish
from reliableq.services import WrongStatus
from tests.factories import JobFactory, RunningJobFactory

from .helpers import claim_jobs, db_clock, db_now


def fail_until_dead(job: Job) -> None:
    """Run the job's whole budget through claim and finish, every attempt a transient failure."""
    while True:
        [claimed] = claim_jobs()
        last = claimed.attempt >= claimed.max_attempts
        jobqueue.finish(
            [
                Finish(
                    job_id=job.pk,
                    lease_token=claimed.lease_token,
                    status=JobStatus.DEAD if last else JobStatus.PENDING,
                    outcome=Outcome.FAILED_TRANSIENT,
                    error=f"attempt {claimed.attempt} failed",
                    delay=0.0,
                )
            ]
        )
        if last:
            return


@pytest.mark.django_db
def test_replay_returns_a_dead_job_to_pending_with_its_id_history_and_a_new_budget() -> None:
    job = JobFactory(kind="test.always_fails", payload={"to": "ops"}, max_attempts=3)
    fail_until_dead(job)
    dead = Job.objects.get(pk=job.pk)
    assert (dead.status, dead.attempts) == (JobStatus.DEAD, 3)
    history = list(Attempt.objects.filter(job=job).order_by("number").values())

    replayed = services.replay(job.pk)

    assert replayed.pk == job.pk
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING
    assert row.attempts == 3  # attempt numbers keep counting
    assert row.max_attempts == 3 + 3  # the kind's budget (test.always_fails: 3) on top
    assert row.finished_at is None and row.lease_token is None
    assert db_now() <= row.run_at <= db_clock()  # due again at once, by database time
    assert row.payload == {"to": "ops"}
    assert list(Attempt.objects.filter(job=job).order_by("number").values()) == history

    # It runs again as attempt 4, under the same effect key.
    [claimed] = claim_jobs()
    assert (claimed.id, claimed.attempt) == (job.pk, 4)
    assert claimed.idempotency_key == f"reliableq:test.always_fails:{job.pk}" == row.effect_key
    assert list(Attempt.objects.filter(job=job).order_by("number").values_list("number", flat=True)) == [1, 2, 3, 4]


@pytest.mark.django_db
def test_replay_of_a_kind_no_longer_registered_still_gets_a_bounded_budget() -> None:
    job = JobFactory(kind="retired.kind", status=JobStatus.DEAD, attempts=2, max_attempts=2)
    services.replay(job.pk)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING
    assert row.max_attempts == 2 + 2


@pytest.mark.django_db
@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.CANCELLED])
def test_replay_of_a_job_that_is_not_dead_is_refused(status: str) -> None:
    job = RunningJobFactory() if status == JobStatus.RUNNING else JobFactory(status=status)
    before = Job.objects.values().get(pk=job.pk)
    with pytest.raises(WrongStatus, match=f"is {status}; this needs a DEAD job") as raised:
        services.replay(job.pk)
    assert raised.value.needed == JobStatus.DEAD
    assert Job.objects.values().get(pk=job.pk) == before


@pytest.mark.django_db
def test_replay_of_an_unknown_id_is_does_not_exist() -> None:
    with pytest.raises(Job.DoesNotExist):
        services.replay(uuid.uuid4())


@pytest.mark.django_db
def test_cancel_withdraws_a_pending_job_and_it_is_never_claimed() -> None:
    job = JobFactory()
    start = db_now()
    cancelled = services.cancel(job.pk)
    assert cancelled.pk == job.pk and cancelled.status == JobStatus.CANCELLED
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.CANCELLED
    assert row.finished_at is not None and row.finished_at >= start
    assert claim_jobs() == []
    assert not Attempt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("status", [JobStatus.DEAD, JobStatus.SUCCEEDED, JobStatus.CANCELLED])
def test_cancel_of_a_finished_job_is_refused(status: str) -> None:
    job = JobFactory(status=status)
    before = Job.objects.values().get(pk=job.pk)
    with pytest.raises(WrongStatus, match=f"is {status}; this needs a WAITING, PENDING or RUNNING job"):
        services.cancel(job.pk)
    assert Job.objects.values().get(pk=job.pk) == before
