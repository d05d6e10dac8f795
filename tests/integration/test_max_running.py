"""max_running: a fleet-wide cap per kind, enforced inside the claim transaction."""

from __future__ import annotations

import threading

import pytest

import reliableq
from reliableq import leases
from reliableq.models import Job, JobStatus
from testproject.jobs import capped
from tests.factories import JobFactory

from .helpers import spawn

reliableq.handler("test.capped", max_running=2)(capped)
pytestmark = pytest.mark.django_db(transaction=True)


def test_claim_takes_no_more_of_a_capped_kind_than_its_cap_leaves() -> None:
    JobFactory.create_batch(5, kind="test.capped")
    JobFactory.create_batch(3, kind="demo.noop")
    jobs, _ = leases.claim(worker_id="w1", queues=["default"], limit=10, lease_seconds=30, caps={"test.capped": 2})
    kinds = sorted(j.kind for j in jobs)
    assert kinds == ["demo.noop"] * 3 + ["test.capped"] * 2
    # The cap counts what runs anywhere: a second worker gets none until one finishes.
    more, _ = leases.claim(worker_id="w2", queues=["default"], limit=10, lease_seconds=30, caps={"test.capped": 2})
    assert more == []
    first = next(j for j in jobs if j.kind == "test.capped")
    leases.finish([leases.Finish(job_id=first.id, lease_token=first.lease_token, status="SUCCEEDED", outcome="SUCCEEDED")])
    more, _ = leases.claim(worker_id="w2", queues=["default"], limit=10, lease_seconds=30, caps={"test.capped": 2})
    assert [j.kind for j in more] == ["test.capped"]


def test_concurrent_claimers_never_exceed_the_cap_together() -> None:
    JobFactory.create_batch(40, kind="test.capped")
    barrier = threading.Barrier(8)

    def claimer(n: int) -> int:
        barrier.wait()
        jobs, _ = leases.claim(worker_id=f"w{n}", queues=["default"], limit=5, lease_seconds=30, caps={"test.capped": 3})
        return len(jobs)

    taken = [f.result(timeout=60) for f in [spawn(claimer, n) for n in range(8)]]
    assert sum(taken) == 3
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 3


def test_without_caps_the_claim_ignores_max_running() -> None:
    JobFactory.create_batch(4, kind="test.capped")
    jobs, _ = leases.claim(worker_id="w1", queues=["default"], limit=10, lease_seconds=30)
    assert len(jobs) == 4
