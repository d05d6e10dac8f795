"""Periodic jobs: one job per cron slot across the fleet, scheduled ahead by database time."""

from __future__ import annotations

import datetime as dt

import pytest

import reliableq
from reliableq import scheduler
from reliableq.models import Job
from testproject.jobs import every_second

from .helpers import spawn

reliableq.handler("test.every_second", cron="* * * * * *")(every_second)
UTC = dt.timezone.utc


def test_next_slot_is_strictly_after_now() -> None:
    now = dt.datetime(2030, 1, 1, 12, 4, 59, 500000, tzinfo=UTC)
    assert scheduler.next_slot("*/5 * * * *", now) == dt.datetime(2030, 1, 1, 12, 5, tzinfo=UTC)
    assert scheduler.next_slot("*/5 * * * *", dt.datetime(2030, 1, 1, 12, 5, tzinfo=UTC)) == dt.datetime(
        2030, 1, 1, 12, 10, tzinfo=UTC
    )


def test_a_bad_expression_is_refused_when_the_handler_is_registered() -> None:
    with pytest.raises(ValueError, match="Invalid cron expression"):
        reliableq.handler("test.bad_cron", cron="every tuesday")(every_second)


@pytest.mark.django_db(transaction=True)
def test_scheduling_a_slot_twice_makes_one_job() -> None:
    now = dt.datetime(2030, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)
    first = scheduler.schedule_next(now)
    again = scheduler.schedule_next(now)
    assert [j.kind for j in first] == ["test.every_second"] and again == []
    job = Job.objects.get(kind="test.every_second")
    assert job.run_at == dt.datetime(2030, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert job.dedupe_key == "cron:test.every_second:2030-01-01T00:00:01+00:00"


@pytest.mark.django_db(transaction=True)
def test_many_workers_scheduling_at_once_make_one_job_per_slot() -> None:
    now = dt.datetime(2030, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)
    futures = [spawn(scheduler.schedule_next, now) for _ in range(8)]
    created = [job for f in futures for job in f.result(timeout=60)]
    assert len(created) == 1
    assert Job.objects.filter(kind="test.every_second").count() == 1
