"""A claim whose COMMIT went unanswered may have committed: the worker puts those jobs back."""

from __future__ import annotations

import pytest

from reliableq import queue as jobqueue
from reliableq.models import Attempt, Job, JobStatus, Outcome
from tests.factories import JobFactory


@pytest.mark.django_db
def test_release_unacknowledged_requeues_only_this_workers_unknown_claims() -> None:
    JobFactory.create_batch(3)
    mine, _ = jobqueue.claim(worker_id="w-me", queues=["default"], limit=3, lease_seconds=30)
    JobFactory()
    theirs, _ = jobqueue.claim(worker_id="w-other", queues=["default"], limit=1, lease_seconds=30)
    known, unheard = mine[0], mine[1:]  # the worker heard about one claim only

    released = jobqueue.release_unacknowledged(worker_id="w-me", known=[known.lease_token])

    assert sorted(released) == sorted(j.id for j in unheard)
    for job in unheard:
        row = Job.objects.get(pk=job.id)
        assert (row.status, row.lease_token, row.attempts) == (JobStatus.PENDING, None, 1)
        assert Attempt.objects.get(job_id=job.id, number=1).outcome == Outcome.LEASE_LOST
    assert Job.objects.get(pk=known.id).lease_token == known.lease_token
    assert Job.objects.get(pk=theirs[0].id).status == JobStatus.RUNNING


@pytest.mark.django_db
def test_release_unacknowledged_buries_a_job_whose_budget_it_spent() -> None:
    JobFactory(max_attempts=1)
    jobqueue.claim(worker_id="w-me", queues=["default"], limit=1, lease_seconds=30)
    [job_id] = jobqueue.release_unacknowledged(worker_id="w-me", known=[])
    job = Job.objects.get(pk=job_id)
    assert job.status == JobStatus.DEAD and job.finished_at is not None and job.last_error
