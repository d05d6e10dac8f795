"""reliableq.testing, used as a user would to test handlers: the example handlers of testproject."""

from __future__ import annotations

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.testing import drain, run_due

pytestmark = pytest.mark.django_db


def test_run_due_runs_a_job_in_process_through_a_real_claim_and_finish():
    job = reliableq.enqueue("demo.noop", {}, queue="mail")
    [ran] = run_due()
    assert (ran.job_id, ran.kind, ran.attempt, ran.outcome, ran.status) == (
        job.id,
        "demo.noop",
        1,
        Outcome.SUCCEEDED,
        JobStatus.SUCCEEDED,
    )
    assert Job.objects.get(pk=job.id).status == JobStatus.SUCCEEDED
    assert Attempt.objects.get(job=job).worker_id == "reliableq.testing"
    assert run_due() == []


def test_run_due_only_takes_the_queues_asked_for():
    mail, other = reliableq.enqueue("demo.noop", {}, queue="mail"), reliableq.enqueue("demo.noop", {}, queue="other")
    assert [r.job_id for r in run_due(["mail"])] == [mail.id]
    assert Job.objects.get(pk=other.id).status == JobStatus.PENDING


def test_a_flaky_handler_is_retried_by_drain_until_it_succeeds():
    job = reliableq.enqueue("test.flaky", {"failures": 2})
    ran = drain()
    assert [(r.attempt, r.outcome) for r in ran] == [
        (1, Outcome.FAILED_TRANSIENT),
        (2, Outcome.FAILED_TRANSIENT),
        (3, Outcome.SUCCEEDED),
    ]
    assert Job.objects.get(pk=job.id).status == JobStatus.SUCCEEDED


def test_a_permanent_error_ends_dead_at_once_with_a_redacted_error():
    job = reliableq.enqueue("test.permanent", {})
    [ran] = drain()
    assert (ran.outcome, ran.status) == (Outcome.FAILED_PERMANENT, JobStatus.DEAD)
    assert "hunter2" not in ran.error and "[redacted]" in ran.error
    assert Job.objects.get(pk=job.id).status == JobStatus.DEAD


def test_a_handler_that_always_fails_ends_dead_after_its_budget():
    reliableq.enqueue("test.always_fails", {})
    ran = drain()
    assert [r.outcome for r in ran] == [Outcome.FAILED_TRANSIENT] * 3 and ran[-1].status == JobStatus.DEAD


def test_the_fixtures_give_the_same_helpers(run_jobs, drain_jobs):
    assert (run_jobs, drain_jobs) == (run_due, drain)
