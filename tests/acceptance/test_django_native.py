"""Fleet-wide limits, periodic jobs and instant wake-ups, with real worker processes."""

from __future__ import annotations

import datetime as dt

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus
from testproject.jobs import capped, every_second
from tests.support import wait_until

from .helpers import max_in_flight

reliableq.handler("test.capped", max_running=2)(capped)
reliableq.handler("test.every_second", cron="* * * * * *")(every_second)
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_max_running_caps_a_kind_across_every_worker_process(spawn_worker):
    for _ in range(12):
        reliableq.enqueue("test.capped", {"seconds": 0.3})
    # One slot per worker: two jobs in flight at once can only be two workers at once.
    workers = [spawn_worker("--concurrency", "1", "--burst", env={"RELIABLEQ_TEST_CAPPED": "1"}) for _ in range(3)]
    for worker in workers:
        assert worker.wait(timeout=90) == 0, worker.output()[-2000:]
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 12
    intervals = list(Attempt.objects.filter(job__kind="test.capped").values_list("started_at", "finished_at"))
    # Three slots in the fleet, yet never more than the cap of two at once; and the cap is reached.
    assert max_in_flight(intervals) == 2


def test_two_workers_never_schedule_one_cron_slot_twice(spawn_worker):
    env = {"RELIABLEQ_TEST_CRON": "1", "RELIABLEQ_SCHEDULE_SECONDS": "0.2"}
    spawn_worker(env=env)
    spawn_worker(env=env)
    wait_until(
        lambda: Job.objects.filter(kind="test.every_second", status=JobStatus.SUCCEEDED).count() >= 3,
        timeout=30,
        what="three periodic runs",
    )
    jobs = list(Job.objects.filter(kind="test.every_second").values_list("dedupe_key", "payload", "status"))
    slots = [key for key, _, _ in jobs]
    assert len(slots) == len(set(slots))  # one job per slot
    for key, payload, _ in jobs:
        slot = dt.datetime.fromisoformat(payload["scheduled_for"])
        assert key == f"schedule:test.every_second:{slot.isoformat()}" and slot.microsecond == 0
    for key, _, status in jobs:
        if status == JobStatus.SUCCEEDED:
            assert Attempt.objects.filter(job__dedupe_key=key).count() == 1  # each slot ran once


def test_an_idle_worker_claims_a_new_job_at_once_when_notified(spawn_worker):
    # Poll only every 60 s: without the NOTIFY wake-up the job would wait a minute.
    worker = spawn_worker(env={"RELIABLEQ_POLL_SECONDS": "60"})
    worker.wait_for_output("(probe heard)")  # its LISTEN is in place: a NOTIFY from now on wakes it
    job = reliableq.enqueue("demo.noop", {})
    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        timeout=15,
        what="the notified worker to run the job",
    )


def test_with_notifications_off_the_worker_still_finds_the_job_by_polling(spawn_worker):
    worker = spawn_worker(env={"RELIABLEQ_POLL_SECONDS": "0.5", "RELIABLEQ_LISTEN_NOTIFY": "0"})
    worker.wait_for_output("started")
    job = reliableq.enqueue("demo.noop", {})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=15, what="polling")
