"""max_running: a fleet-wide cap per kind, enforced inside the claim transaction."""

from __future__ import annotations

import threading

import pytest

import reliableq
from reliableq import queue as jobqueue
from reliableq.models import Job, JobStatus
from testproject.jobs import capped
from tests.factories import JobFactory

from .helpers import spawn

reliableq.handler("test.capped", max_running=2)(capped)
pytestmark = pytest.mark.django_db(transaction=True)


def test_claim_takes_no_more_of_a_capped_kind_than_its_cap_leaves() -> None:
    JobFactory.create_batch(5, kind="test.capped")
    JobFactory.create_batch(3, kind="demo.noop")
    jobs, _ = jobqueue.claim(worker_id="w1", queues=["default"], limit=10, lease_seconds=30, caps={"test.capped": 2})
    kinds = sorted(j.kind for j in jobs)
    assert kinds == ["demo.noop"] * 3 + ["test.capped"] * 2
    # The cap counts what runs anywhere: a second worker gets none until one finishes.
    more, _ = jobqueue.claim(worker_id="w2", queues=["default"], limit=10, lease_seconds=30, caps={"test.capped": 2})
    assert more == []
    first = next(j for j in jobs if j.kind == "test.capped")
    jobqueue.finish(
        [jobqueue.Finish(job_id=first.id, lease_token=first.lease_token, status="SUCCEEDED", outcome="SUCCEEDED")]
    )
    more, _ = jobqueue.claim(worker_id="w2", queues=["default"], limit=10, lease_seconds=30, caps={"test.capped": 2})
    assert [j.kind for j in more] == ["test.capped"]


def test_concurrent_claimers_never_exceed_the_cap_together() -> None:
    JobFactory.create_batch(40, kind="test.capped")
    barrier = threading.Barrier(8)

    def claimer(n: int) -> int:
        barrier.wait()
        jobs, _ = jobqueue.claim(
            worker_id=f"w{n}", queues=["default"], limit=5, lease_seconds=30, caps={"test.capped": 3}
        )
        return len(jobs)

    taken = [f.result(timeout=60) for f in [spawn(claimer, n) for n in range(8)]]
    assert sum(taken) == 3
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 3


def test_without_caps_the_claim_ignores_max_running() -> None:
    JobFactory.create_batch(4, kind="test.capped")
    jobs, _ = jobqueue.claim(worker_id="w1", queues=["default"], limit=10, lease_seconds=30)
    assert len(jobs) == 4


def test_a_claim_that_waited_for_the_cap_starts_its_attempt_after_the_finish_it_waited_for() -> None:
    """Attempt times are what the in-flight checks read: a claim that queued behind the kind's lock
    while a job finished must not date its attempt from before that finish (its transaction's start)."""
    from reliableq.models import Attempt

    from .helpers import lock_waiters, raw_connect

    JobFactory.create_batch(2, kind="test.capped")
    [first], _ = jobqueue.claim(worker_id="w1", queues=["default"], limit=1, lease_seconds=30, caps={"test.capped": 1})
    with raw_connect() as holder:  # another claimer of the kind, holding its lock
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('reliableq:max_running:test.capped'))")
        waiting = spawn(
            jobqueue.claim, worker_id="w2", queues=["default"], limit=1, lease_seconds=30, caps={"test.capped": 1}
        )
        from tests.support import wait_until

        wait_until(lambda: lock_waiters() >= 1, timeout=30, what="the second claim to wait for the lock")
        jobqueue.finish(
            [jobqueue.Finish(job_id=first.id, lease_token=first.lease_token, status="SUCCEEDED", outcome="SUCCEEDED")]
        )
        holder.commit()
    [second], _ = waiting.result(timeout=30)
    ended = Attempt.objects.get(job_id=first.id).finished_at
    started = Attempt.objects.get(job_id=second.id).started_at
    assert started >= ended, f"the second attempt is dated {ended - started} before the first one ended"
