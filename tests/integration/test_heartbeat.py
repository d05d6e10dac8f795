"""The heartbeat renews every held lease in one statement and reports the ones taken over."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from reliableq import queue as jobqueue
from reliableq.models import Attempt, Job, Outcome
from reliableq.queue import db
from reliableq.worker.heartbeat import Heartbeat
from tests.factories import RunningJobFactory

from .helpers import claim_jobs, db_clock, db_now, expire


def heartbeat(held: dict[uuid.UUID, uuid.UUID], lost: list, lease_seconds: float = 60) -> Heartbeat:
    return Heartbeat(held=lambda: dict(held), on_lost=lost.append, lease_seconds=lease_seconds)


@pytest.mark.django_db
def test_beat_renews_every_held_lease_in_one_statement() -> None:
    jobs = RunningJobFactory.create_batch(3)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(lease_expires_at=Now() + dt.timedelta(seconds=1))
    before = dict(Job.objects.values_list("pk", "lease_expires_at"))
    lost: list = []
    start = db_now()

    with CaptureQueriesContext(db.connection()) as queries:
        heartbeat({j.pk: j.lease_token for j in jobs}, lost, lease_seconds=60).beat()
    end = db_clock()

    assert len(queries.captured_queries) == 1
    assert f"UPDATE {Job._meta.db_table}" in queries.captured_queries[0]["sql"]
    assert lost == []
    for pk, expires in Job.objects.values_list("pk", "lease_expires_at"):
        assert expires > before[pk]
        assert start + dt.timedelta(seconds=60) <= expires <= end + dt.timedelta(seconds=60)
    assert not Attempt.objects.exclude(outcome=Outcome.RUNNING).exists()


@pytest.mark.django_db
def test_beat_with_nothing_held_sends_nothing() -> None:
    lost: list = []
    with CaptureQueriesContext(db.connection()) as queries:
        heartbeat({}, lost).beat()
    assert queries.captured_queries == []
    assert lost == []


@pytest.mark.django_db
def test_beat_reports_a_lease_taken_over_marks_its_attempt_lost_and_leaves_the_job_alone() -> None:
    live = RunningJobFactory()
    taken = RunningJobFactory(worker_id="w-me")
    mine = taken.lease_token
    # Another owner holds the job now; this worker's attempt is still open.
    Job.objects.filter(pk=taken.pk).update(lease_token=uuid.uuid4(), worker_id="w-other")
    taken_before = Job.objects.values().get(pk=taken.pk)
    live_expiry = Job.objects.get(pk=live.pk).lease_expires_at
    lost: list = []
    start = db_now()

    heartbeat({live.pk: live.lease_token, taken.pk: mine}, lost).beat()

    assert lost == [[(taken.pk, mine)]]
    assert Job.objects.values().get(pk=taken.pk) == taken_before
    attempt = Attempt.objects.get(job=taken, lease_token=mine)
    assert attempt.outcome == Outcome.LEASE_LOST
    assert attempt.finished_at is not None and attempt.finished_at >= start
    assert "heartbeat" in attempt.error
    # The other lease was renewed as usual.
    assert Job.objects.get(pk=live.pk).lease_expires_at > live_expiry
    assert Attempt.objects.get(job=live).outcome == Outcome.RUNNING


@pytest.mark.django_db
def test_beat_after_a_rescue_reports_the_loss_and_keeps_the_lease_expired_record() -> None:
    job = RunningJobFactory(worker_id="w-me")
    mine = job.lease_token
    expire(job.pk)
    [current] = claim_jobs(worker_id="w-other")
    job_before = Job.objects.values().get(pk=job.pk)
    first_before = Attempt.objects.values().get(job=job, number=1)
    lost: list = []

    heartbeat({job.pk: mine}, lost).beat()

    assert lost == [[(job.pk, mine)]]
    assert Job.objects.values().get(pk=job.pk) == job_before
    assert job_before["lease_token"] == current.lease_token
    assert Attempt.objects.values().get(job=job, number=1) == first_before  # still LEASE_EXPIRED
    assert Attempt.objects.get(job=job, number=2).outcome == Outcome.RUNNING


@pytest.mark.django_db
def test_beat_does_not_report_a_lease_released_while_it_ran() -> None:
    job = RunningJobFactory()
    Job.objects.filter(pk=job.pk).update(lease_token=uuid.uuid4())
    answers = iter([{job.pk: job.lease_token}, {}])  # finalized between the renew and the check
    lost: list = []
    Heartbeat(held=lambda: next(answers), on_lost=lost.append, lease_seconds=60).beat()
    assert lost == []
    assert Attempt.objects.get(job=job).outcome == Outcome.RUNNING


@pytest.mark.django_db
def test_beat_that_races_the_owners_own_finish_reports_no_loss() -> None:
    """The finish committed between the heartbeat's snapshot and its renew: not a lost lease."""
    job = RunningJobFactory()
    held = {job.pk: job.lease_token}
    result = jobqueue.finish(
        [jobqueue.Finish(job_id=job.pk, lease_token=job.lease_token, status="SUCCEEDED", outcome=Outcome.SUCCEEDED)]
    )
    assert result.finalized == [job.pk]
    lost: list = []
    heartbeat(held, lost).beat()  # still "held": the loop has not dropped it yet
    assert lost == []
    assert Attempt.objects.get(job=job).outcome == Outcome.SUCCEEDED


@pytest.mark.django_db
def test_beat_reports_a_lease_a_rescuer_already_closed_as_expired() -> None:
    job = RunningJobFactory(worker_id="w-paused")
    held = {job.pk: job.lease_token}
    expire(job.pk)
    claimed, rescued = jobqueue.claim(worker_id="w-rescuer", queues=["default"], limit=1, lease_seconds=30)
    assert [r.job_id for r in rescued] == [job.pk] and claimed[0].id == job.pk
    lost: list = []
    heartbeat(held, lost).beat()
    assert lost == [[(job.pk, held[job.pk])]]
    assert Attempt.objects.get(job=job, number=1).outcome == Outcome.LEASE_EXPIRED
