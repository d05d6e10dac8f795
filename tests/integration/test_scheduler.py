"""Periodic jobs: one job per cron slot across the fleet, scheduled ahead by database time."""

from __future__ import annotations

import datetime as dt

import pytest

import reliableq
from reliableq import registry
from reliableq.models import Job
from reliableq.queue import scheduler
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


def tomorrow() -> dt.datetime:
    """A quarter second into a second one day ahead: a slot within MAX_SCHEDULE_SECONDS, not yet due."""
    return (dt.datetime.now(UTC) + dt.timedelta(days=1)).replace(microsecond=250000)


@pytest.mark.django_db(transaction=True)
def test_scheduling_a_slot_twice_makes_one_job() -> None:
    now = tomorrow()
    first = scheduler.schedule_next(now)
    again = scheduler.schedule_next(now)
    assert [j.kind for j in first] == ["test.every_second"] and again == []
    job = Job.objects.get(kind="test.every_second")
    slot = now.replace(microsecond=0) + dt.timedelta(seconds=1)
    assert job.run_at == slot
    assert job.dedupe_key == f"cron:test.every_second:{slot.isoformat()}"


@pytest.mark.django_db(transaction=True)
def test_a_slot_beyond_max_schedule_seconds_waits_until_it_comes_within_the_bound(settings) -> None:
    """A slot further ahead than the bound is not inserted yet (enqueue would refuse it); within it, it is."""
    now = scheduler.database_now()
    minute = (now + dt.timedelta(minutes=30)).minute  # the next slot is 29-31 minutes ahead
    reliableq.handler("test.hourly", cron=f"{minute} * * * *")(every_second)
    try:
        settings.RELIABLEQ = {**settings.RELIABLEQ, "MAX_SCHEDULE_SECONDS": 600}
        assert "test.hourly" not in [j.kind for j in scheduler.schedule_next()]
        settings.RELIABLEQ = {**settings.RELIABLEQ, "MAX_SCHEDULE_SECONDS": 7200}
        assert "test.hourly" in [j.kind for j in scheduler.schedule_next()]
    finally:
        registry._handlers.pop("test.hourly")


@pytest.mark.django_db(transaction=True)
def test_many_workers_scheduling_at_once_make_one_job_per_slot() -> None:
    now = tomorrow()
    futures = [spawn(scheduler.schedule_next, now) for _ in range(8)]
    created = [job for f in futures for job in f.result(timeout=60)]
    assert len(created) == 1
    assert Job.objects.filter(kind="test.every_second").count() == 1
