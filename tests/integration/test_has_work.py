"""has_work: what --burst waits for (due or running jobs in the worker's queues)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.functions import Now

from reliableq.models import Job, JobStatus
from reliableq.services import has_work
from tests.factories import JobFactory, RunningJobFactory


@pytest.mark.django_db
def test_no_jobs_is_no_work() -> None:
    assert not has_work(["default"])


@pytest.mark.django_db
def test_a_due_pending_job_is_work() -> None:
    JobFactory()
    assert has_work(["default"])


@pytest.mark.django_db
def test_a_running_job_is_work_even_with_a_live_lease() -> None:
    RunningJobFactory()
    assert has_work(["default"])


@pytest.mark.django_db
def test_future_finished_and_other_queue_jobs_are_not_work() -> None:
    later = JobFactory()
    Job.objects.filter(pk=later.pk).update(run_at=Now() + dt.timedelta(minutes=10))
    for status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED):
        JobFactory(status=status)
    JobFactory(queue="elsewhere")
    assert not has_work(["default"])
    assert has_work(["default", "elsewhere"])
