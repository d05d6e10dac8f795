"""The worker's ledger settles a batch of written ends: which attempts it forgets, which leases it
stops renewing, and a lease another attempt of the same job now holds left alone."""

from __future__ import annotations

import uuid

from reliableq.queue import ClaimedJob
from reliableq.worker.ledger import Ledger


def claimed(job_id: uuid.UUID | None = None) -> ClaimedJob:
    return ClaimedJob(
        id=job_id or uuid.uuid4(),
        kind="fake.kind",
        queue="default",
        priority=0,
        payload={},
        attempt=1,
        max_attempts=3,
        lease_token=uuid.uuid4(),
        worker_id="w",
    )


def test_a_claim_is_held_and_in_flight_until_its_ends_are_settled() -> None:
    ledger = Ledger()
    jobs = [claimed() for _ in range(3)]
    ledger.add(jobs, [10.0, 20.0, 30.0])
    assert len(ledger) == 3
    assert ledger.held() == {job.id: job.lease_token for job in jobs}
    assert sorted(ledger.tokens()) == sorted(job.lease_token for job in jobs)
    assert [ledger.get(job.lease_token).deadline for job in jobs] == [10.0, 20.0, 30.0]  # type: ignore[union-attr]

    flights = ledger.settle([(jobs[0].id, jobs[0].lease_token, True), (jobs[1].id, jobs[1].lease_token, False)])

    assert [f.job if f else None for f in flights] == [jobs[0], jobs[1]]
    # The end that frees its slot forgets the attempt; the one that does not (a late result whose
    # timeout already freed the slot) keeps it until its own end is settled.
    assert ledger.get(jobs[0].lease_token) is None
    assert ledger.get(jobs[1].lease_token) is not None
    assert len(ledger) == 2
    # Both leases stop being renewed; the third is still held.
    assert ledger.held() == {jobs[2].id: jobs[2].lease_token}


def test_settling_an_old_attempt_leaves_the_lease_of_the_jobs_new_one() -> None:
    ledger = Ledger()
    old = claimed()
    ledger.add([old], [1.0])
    ledger.drop(old.id, old.lease_token)  # the heartbeat found the lease taken by another owner
    new = claimed(old.id)  # the same job claimed again by this worker
    ledger.add([new], [2.0])

    [flight] = ledger.settle([(old.id, old.lease_token, True)])

    assert flight is not None and flight.job is old
    assert ledger.held() == {new.id: new.lease_token}
    assert ledger.get(new.lease_token) is not None


def test_an_unknown_end_settles_to_none() -> None:
    ledger = Ledger()
    job = claimed()
    assert ledger.settle([(job.id, job.lease_token, True)]) == [None]
    assert len(ledger) == 0 and ledger.held() == {}
