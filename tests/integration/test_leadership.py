"""The maintenance lease: one holder at a time, renewed under its token, taken over once it expires,
fenced (a stale token renews nothing), given up at once on resign. Retention deletes in bounded batches."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import checks
from django.db.models.functions import Now

from reliableq import services
from reliableq.checks import retention_errors
from reliableq.models import Job, JobStatus, Leader
from reliableq.queue import leadership, prune
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def expire(name: str = "maintenance") -> None:
    Leader.objects.filter(name=name).update(expires_at=Now() - dt.timedelta(seconds=1))


def test_one_holder_at_a_time_renewing_under_its_token():
    first = leadership.lead("maintenance", holder="w1", seconds=30, token=None)
    assert first is not None
    assert leadership.lead("maintenance", holder="w2", seconds=30, token=None) is None, "held by w1"
    assert leadership.lead("maintenance", holder="w1", seconds=30, token=first) == first, "a renewal keeps it"
    assert Leader.objects.get().holder == "w1"


def test_an_expired_lease_is_taken_over_under_a_new_token_and_the_old_one_is_fenced():
    old = leadership.lead("maintenance", holder="w1", seconds=30, token=None)
    expire()
    new = leadership.lead("maintenance", holder="w2", seconds=30, token=None)
    assert new is not None and new != old
    assert leadership.lead("maintenance", holder="w1", seconds=30, token=old) is None, "w1 woke up too late"
    assert Leader.objects.get().holder == "w2"
    assert not leadership.resign("maintenance", token=old), "a stale token cannot resign for the new holder"


def test_a_holder_that_outlived_its_own_lease_gets_a_new_token():
    old = leadership.lead("maintenance", holder="w1", seconds=30, token=None)
    expire()
    again = leadership.lead("maintenance", holder="w1", seconds=30, token=old)
    assert again is not None and again != old


def test_resigning_frees_the_duty_at_once():
    token = leadership.lead("maintenance", holder="w1", seconds=30, token=None)
    assert leadership.resign("maintenance", token=token)
    assert leadership.lead("maintenance", holder="w2", seconds=30, token=None) is not None


def test_retention_deletes_old_finished_jobs_by_status(settings):
    settings.RELIABLEQ = {**settings.RELIABLEQ, "RETENTION_SECONDS": {"SUCCEEDED": 60, "DEAD": 3600}}
    old = dt.timedelta(minutes=10)
    done = JobFactory.create_batch(3, status=JobStatus.SUCCEEDED)
    dead_recent = JobFactory(status=JobStatus.DEAD)
    cancelled_old = JobFactory(status=JobStatus.CANCELLED)
    Job.objects.filter(pk__in=[j.pk for j in done] + [dead_recent.pk, cancelled_old.pk]).update(finished_at=Now() - old)
    pending = JobFactory()

    assert services.retain() == {"SUCCEEDED": 3, "DEAD": 0}  # CANCELLED: not configured, kept
    assert set(Job.objects.values_list("pk", flat=True)) == {dead_recent.pk, cancelled_old.pk, pending.pk}


def test_retention_takes_at_most_one_batch_per_status_per_round():
    JobFactory.create_batch(5, status=JobStatus.SUCCEEDED)
    Job.objects.update(finished_at=Now() - dt.timedelta(days=2))
    assert services.prune(older_than=dt.timedelta(days=1), statuses=["SUCCEEDED"], batch_size=2, max_batches=1) == 2
    assert Job.objects.count() == 3


def test_a_retention_round_keeps_deleting_batches_until_its_time_is_spent(settings, monkeypatch):
    """One batch a round (the first design) deleted 1,000 rows a minute: far less than a fleet
    finishes, so the table grew without end. A round now deletes batches for up to its budget and
    says when old rows are left, so the leader goes on at its next tick."""
    settings.RELIABLEQ = {**settings.RELIABLEQ, "RETENTION_SECONDS": {"SUCCEEDED": 60}}
    monkeypatch.setattr(prune, "RETENTION_BATCH", 2)  # the batch the round deletes at a time
    JobFactory.create_batch(7, status=JobStatus.SUCCEEDED)
    Job.objects.update(finished_at=Now() - dt.timedelta(minutes=10))

    spent = services.retain(budget_seconds=0.0)  # no time: one batch, and more is left
    assert spent == {"SUCCEEDED": 2} and spent.more
    rest = services.retain(budget_seconds=60.0)
    assert rest == {"SUCCEEDED": 5} and not rest.more
    assert not Job.objects.exists()


@pytest.mark.parametrize("value", [[], {"PENDING": 60}, {"DEAD": 0}, {"DEAD": "1d"}, {"DEAD": True}])
def test_an_invalid_retention_setting_is_a_system_check_error(value):
    [error] = retention_errors(value)
    assert error.id == "reliableq.E002" and error.level == checks.ERROR


def test_valid_retention_settings_pass_the_check():
    assert retention_errors({"SUCCEEDED": 60, "DEAD": None, "CANCELLED": 0.5}) == []
