"""Flow control with real worker processes, SIGKILL in the mix, checked from the attempt history.

Per-key limits and rate limits are fleet-wide: several `runworker` processes compete for the same
jobs, and the invariants are read back from the attempts the database recorded (their
[started_at, finished_at) intervals, by database time), never from what a worker says.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections import defaultdict

import pytest

import reliableq
from reliableq import services
from reliableq.models import Attempt, Job, JobStatus, Outcome
from testproject.jobs import per_key, rated
from tests.support import wait_until

from .helpers import db_now, max_in_flight

reliableq.handler("test.per_key", max_running_per_key=2)(per_key)
reliableq.handler("test.rated", rate_limit="10/s")(rated)
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
FLOW = {"RELIABLEQ_TEST_FLOW": "1"}


def all_finished(kind: str, count: int) -> bool:
    return Job.objects.filter(kind=kind, status=JobStatus.SUCCEEDED).count() == count


def test_per_key_running_never_exceeds_n_across_processes_even_when_one_is_killed(spawn_worker):
    for n in range(36):
        reliableq.enqueue("test.per_key", {"seconds": 0.3, "n": n}, concurrency_key=f"account:{n % 3}")
    workers = [spawn_worker("--concurrency", "4", "--lease-seconds", "2", env=FLOW) for _ in range(3)]
    wait_until(lambda: Job.objects.filter(status=JobStatus.RUNNING).count() >= 4, timeout=30, what="claims")
    workers[0].signal(signal.SIGKILL)  # its RUNNING rows hold their keys' slots until the leases expire

    wait_until(lambda: all_finished("test.per_key", 36), timeout=120, what="every job to succeed")

    by_key: dict[str, list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
    for key, started, finished in Attempt.objects.filter(job__kind="test.per_key").values_list(
        "job__concurrency_key", "started_at", "finished_at"
    ):
        by_key[key].append((started, finished))
    assert set(by_key) == {"account:0", "account:1", "account:2"}
    # 12 slots in the fleet, 3 keys, yet never more than 2 of one key at once; and 2 is reached.
    assert {key: max_in_flight(intervals) for key, intervals in by_key.items()} == dict.fromkeys(by_key, 2)


def test_every_one_second_window_of_a_10_per_second_kind_holds_at_most_10_starts(spawn_worker):
    reliableq.enqueue_many("test.rated", [{"n": n} for n in range(45)])
    for _ in range(3):
        spawn_worker("--concurrency", "8", env=FLOW)

    wait_until(lambda: all_finished("test.rated", 45), timeout=60, what="every rated job to succeed")

    starts = sorted(Attempt.objects.filter(job__kind="test.rated").values_list("started_at", flat=True))
    assert len(starts) == 45  # throttled jobs waited without spending an attempt
    window = dt.timedelta(seconds=1)
    busiest = max(sum(1 for later in starts[i:] if later - start < window) for i, start in enumerate(starts))
    assert busiest <= 10
    # 45 starts at 10 per second take more than 4 seconds, and the limiter let them through steadily.
    assert starts[-1] - starts[0] > dt.timedelta(seconds=3.5)


def test_nothing_is_claimed_from_a_paused_queue_and_resume_wakes_the_workers(spawn_worker):
    services.pause("mail")
    paused_at = db_now()
    mail = [reliableq.enqueue("demo.noop", {"n": n}, queue="mail").pk for n in range(5)]
    other = [reliableq.enqueue("demo.noop", {"n": n}, queue="default").pk for n in range(5)]
    # Poll only once a minute: the resume below must wake the worker by NOTIFY.
    spawn_worker("--queues", "mail,default", env={"RELIABLEQ_POLL_SECONDS": "60"})

    wait_until(
        lambda: Job.objects.filter(pk__in=other, status=JobStatus.SUCCEEDED).count() == 5,
        timeout=30,
        what="the running queue's jobs",
    )
    assert not Attempt.objects.filter(job__queue="mail", started_at__gte=paused_at).exists()
    assert set(Job.objects.filter(pk__in=mail).values_list("status", flat=True)) == {JobStatus.PENDING}

    services.resume("mail")
    wait_until(
        lambda: Job.objects.filter(pk__in=mail, status=JobStatus.SUCCEEDED).count() == 5,
        timeout=15,
        what="the resumed queue's jobs, woken by NOTIFY",
    )


def test_a_running_job_is_cancelled_within_a_third_of_its_lease_plus_a_poll(spawn_worker):
    lease = 3.0
    job = reliableq.enqueue("test.cancellable", {"seconds": 60})
    spawn_worker("--lease-seconds", str(lease), env={"RELIABLEQ_POLL_SECONDS": "0.5"})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.RUNNING, timeout=30, what="the claim")

    asked = services.cancel(job.pk)
    row = wait_until(
        lambda: (found := Job.objects.get(pk=job.pk)).status == JobStatus.CANCELLED and found,
        timeout=30,
        what="the cancel to reach the handler",
    )

    assert row.finished_at - asked.cancel_requested_at <= dt.timedelta(seconds=lease / 3 + 0.5 + 1.0)
    [attempt] = Attempt.objects.filter(job_id=job.pk)
    assert attempt.outcome == Outcome.CANCELLED and row.attempts == 1  # no retry


def test_a_handler_that_finishes_anyway_keeps_its_success(spawn_worker):
    job = reliableq.enqueue("test.cancellable", {"seconds": 2.5, "ignore": True})
    spawn_worker("--lease-seconds", "1.5")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.RUNNING, timeout=30, what="the claim")
    services.cancel(job.pk)
    wait_until(lambda: Job.objects.get(pk=job.pk).finished_at is not None, timeout=30, what="the end")
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED


def test_a_snoozed_job_with_one_attempt_succeeds_under_a_worker(spawn_worker):
    job = reliableq.enqueue("test.snooze", {"times": 2, "seconds": 0.2})
    spawn_worker(env={"RELIABLEQ_POLL_SECONDS": "0.1"})  # not --burst: it would stop while the job snoozes
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, timeout=30, what="success")
    outcomes = list(Attempt.objects.filter(job_id=job.pk).order_by("number").values_list("outcome", flat=True))
    assert outcomes == [Outcome.SNOOZED, Outcome.SNOOZED, Outcome.SUCCEEDED]
