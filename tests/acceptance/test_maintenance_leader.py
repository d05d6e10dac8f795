"""Maintenance is done by one elected worker: rescue, cron and retention; SIGKILL the leader and
another worker takes the duties over within the leader's short lease, and rescues its jobs."""

from __future__ import annotations

import datetime as dt
import signal
import time

import pytest
from django.db import connection

import reliableq
from reliableq.models import Job, JobStatus, Leader, Outcome
from tests.support import wait_until

from .helpers import attempts, owner_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEADS = "is the maintenance leader"
LEASE = 2.0  # worker_env's RELIABLEQ_LEASE_SECONDS, and so the maintenance lease's length too


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def test_one_worker_of_a_fleet_leads_and_a_killed_leader_is_replaced_within_one_lease(spawn_worker):
    first = spawn_worker()
    first.wait_for_output(LEADS, timeout=30)
    job = reliableq.enqueue("test.sleep", {"seconds": 60})
    wait_until(owner_of(job.id), timeout=30, what="the leader to take the long job")
    others = [spawn_worker(), spawn_worker()]
    for worker in others:
        worker.wait_for_output(" started: ", timeout=30)
    # A whole lease after the others started, bidding every third of it, the first still leads:
    # it renewed the lease after that lease ran out, by the database's clock, however slow the machine.
    renewed_past = db_now() + dt.timedelta(seconds=2 * LEASE)  # the lease, then one renewal's length
    lease = wait_until(
        lambda: Leader.objects.filter(expires_at__gte=renewed_past).first(),
        timeout=30,
        what="the lease renewed past one lease of the others' bids",
    )
    assert lease.holder == "w1"
    assert [LEADS in w.output() for w in others] == [False, False], "one leader for the fleet"

    first.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: any(LEADS in w.output() for w in others), timeout=30, what="a new leader")
    took_over = time.monotonic() - killed_at
    # Its rescue brings the killed leader's job back; another worker runs it again.
    wait_until(lambda: owner_of(job.id)() in ("w2", "w3"), timeout=30, what="the job taken back")
    history = attempts(job.id)
    assert [a.outcome for a in history] == [Outcome.LEASE_EXPIRED, Outcome.RUNNING]
    assert sum(LEADS in w.output() for w in others) == 1, "exactly one successor"
    # The lease runs out at most LEASE after the leader's last renewal (every LEASE/3); the
    # successors try for it every LEASE/3 too. Slack for a loaded machine.
    assert took_over <= LEASE + LEASE / 3 + 2.0, took_over


def test_a_job_whose_worker_died_with_a_long_leased_leader_comes_back_after_its_own_lease(spawn_worker):
    # The leader's jobs have a 30 s lease, the held job 2 s. The maintenance lease is not the
    # leader's job lease: dying together, the leader must not hold the job's rescue back 30 s.
    leader = spawn_worker("--lease-seconds", "30")
    leader.wait_for_output(LEADS, timeout=30)
    holder = spawn_worker("--queues", "held", "--worker-id", "holder")
    holder.wait_for_output(" started: ", timeout=30)
    job = reliableq.enqueue("test.sleep", {"seconds": 120}, queue="held")
    wait_until(lambda: owner_of(job.id)() == "holder", timeout=30, what="the holder to take the job")
    rescuer = spawn_worker("--queues", "held", "--lease-seconds", "30", "--worker-id", "rescuer")
    rescuer.wait_for_output(" started: ", timeout=30)

    leader.signal(signal.SIGKILL)
    holder.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: owner_of(job.id)() == "rescuer", timeout=60, what="the job running again")
    took = time.monotonic() - killed_at
    assert [a.outcome for a in attempts(job.id)] == [Outcome.LEASE_EXPIRED, Outcome.RUNNING]
    assert LEADS in rescuer.output()
    # The job's lease (2 s) and the leader's (lead_seconds: 2 s here) run out together; bids come
    # every third of the latter. The leader's 30 s job lease took 20-30 s. Slack for a loaded machine.
    assert took <= LEASE + LEASE + LEASE / 3 + 3.0, took


def test_a_rescued_job_wakes_an_idle_worker_of_its_queue_at_once(spawn_worker):
    # The leader serves another queue; the only worker of the job's queue polls every 30 s. The
    # rescue's notification must wake it, as an enqueue's does, not its next poll.
    leader = spawn_worker("--queues", "elsewhere", "--worker-id", "leader")
    leader.wait_for_output(LEADS, timeout=30)
    holder = spawn_worker("--queues", "held", "--worker-id", "holder")
    holder.wait_for_output(" started: ", timeout=30)
    job = reliableq.enqueue("test.sleep", {"seconds": 120}, queue="held")
    wait_until(lambda: owner_of(job.id)() == "holder", timeout=30, what="the holder to take the job")
    idle = spawn_worker("--queues", "held", "--worker-id", "idle", env={"RELIABLEQ_POLL_SECONDS": "30"})
    idle.wait_for_output("(probe heard)", timeout=30)  # its LISTEN is in place: a NOTIFY wakes it from now on

    holder.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: owner_of(job.id)() == "idle", timeout=60, what="the job running again")
    took = time.monotonic() - killed_at
    assert [a.outcome for a in attempts(job.id)] == [Outcome.LEASE_EXPIRED, Outcome.RUNNING]
    # The lease (2 s) runs out, the leader rescues within its POLL_SECONDS (0.1 s); slack for a
    # loaded machine, far under the idle worker's 30 s poll.
    assert took <= LEASE + 0.1 + 5.0, took


def test_a_clean_shutdown_hands_the_lease_over_at_once(spawn_worker):
    first = spawn_worker()
    first.wait_for_output(LEADS, timeout=30)
    second = spawn_worker("--worker-id", "second")
    second.wait_for_output(" started: ", timeout=30)
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    assert "resigned as the maintenance leader" in first.output()
    second.wait_for_output(LEADS, timeout=10)


def test_the_leader_deletes_finished_jobs_past_their_retention(spawn_worker):
    old = reliableq.enqueue("demo.noop", {})
    keep = reliableq.enqueue("demo.noop", {})
    worker = spawn_worker(
        env={"RELIABLEQ_RETENTION_SECONDS": '{"SUCCEEDED": 2}', "RELIABLEQ_RETENTION_INTERVAL_SECONDS": "0.5"}
    )
    wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 2, timeout=30, what="both run")
    Job.objects.filter(pk=keep.pk).update(status=JobStatus.DEAD)  # DEAD: not in this retention setting
    wait_until(lambda: not Job.objects.filter(pk=old.pk).exists(), timeout=30, what="retention to delete it")
    assert Job.objects.filter(pk=keep.pk).exists()
    assert "retention deleted 1 SUCCEEDED" in worker.output()
