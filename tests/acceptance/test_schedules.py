"""Schedules served by real workers: one job per slot, every slot, across the fleet."""

from __future__ import annotations

import datetime as dt

import pytest

import reliableq
from reliableq.models import Job
from testproject.jobs import every_second
from tests.support import wait_until

from .helpers import db_now

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

reliableq.handler("test.every_3s", cron="*/3 * * * * *")(every_second)


def slots_made(kind: str) -> set[dt.datetime]:
    return set(Job.objects.filter(kind=kind).values_list("run_at", flat=True))


def test_a_schedule_faster_than_the_scheduling_interval_loses_no_slot(spawn_worker):
    """Every 3 s, scheduled by a leader that looks every 5 s (the default): each slot has its job."""
    worker = spawn_worker(env={"RELIABLEQ_TEST_CRON3": "1", "RELIABLEQ_SCHEDULE_SECONDS": "5"})
    worker.wait_for_output("is the maintenance leader", timeout=30)
    start = db_now().replace(microsecond=0)
    first = start + dt.timedelta(seconds=3 - start.second % 3 + 3)  # a 3 s slot after the leader's first round
    last = first + dt.timedelta(seconds=15)
    wait_until(lambda: db_now() > last + dt.timedelta(seconds=1), timeout=60, what="the window to pass")
    wanted = {first + dt.timedelta(seconds=3 * n) for n in range(6)}
    assert wanted - slots_made("test.every_3s") == set()
