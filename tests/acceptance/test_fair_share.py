"""Fair share with real worker processes: 8 claimers in 4 processes take a fair kind's jobs in turn.

Read back from the attempts the database recorded: which claim took each job (a worker's claim
starts its attempts at the claim statement's time) and the job's turn.
"""

from __future__ import annotations

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus
from tests.support import claims_of_workers, turns_left_behind, wait_until

from .helpers import max_in_flight

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fair_kinds")]
FAIR = {"RELIABLEQ_TEST_FAIR": "1"}


def starts(kind: str) -> list[tuple[str | None, object, object]]:
    """(fair_key, started_at, finished_at) of every attempt of `kind`, by start."""
    rows = Attempt.objects.filter(job__kind=kind).order_by("started_at", "job__fair_seq", "job_id")
    return list(rows.values_list("job__fair_key", "started_at", "finished_at"))


def claims(kind: str) -> list[tuple[object, object, list[int]]]:
    """Each claim of `kind`'s first attempts, with each job's place in turn order."""
    ranked = Job.objects.filter(kind=kind).order_by("priority", "fair_seq", "id").values_list("id", flat=True)
    rank = {pk: n for n, pk in enumerate(ranked)}
    rows = Attempt.objects.filter(job__kind=kind, number=1).values_list("worker_id", "started_at", "job_id")
    return claims_of_workers((worker, started, rank[job]) for worker, started, job in rows)


def test_eight_claimers_in_four_processes_rotate_among_keys_and_keep_every_slot_busy(spawn_worker):
    reliableq.enqueue_many("test.fair", [{"seconds": 0.05}] * 300, fair_key="flood")
    small = [f"tenant-{n}" for n in range(5)]
    for key in small:
        reliableq.enqueue_many("test.fair", [{"seconds": 0.05}] * 12, fair_key=key)
    for _ in range(4):
        spawn_worker("--concurrency", "2", env=FAIR)

    done = lambda: Job.objects.filter(kind="test.fair", status=JobStatus.SUCCEEDED).count() == 360  # noqa: E731
    wait_until(done, timeout=120, what="every fair job to succeed")

    # Each claim took the next turns nobody held (a claim's limit, its free slots, is at most 2 here):
    # FIFO would leave the small tenants' turns behind the flood's first claims. Claim statements'
    # start times order the claims only where a worker's next claim bounds one's end.
    assert turns_left_behind(claims("test.fair"), tokens=2) == []
    taken = starts("test.fair")
    # Work-conserving: once the small tenants are done, the flood alone fills all 8 slots.
    last_small = max(s for key, s, _ in taken if key != "flood")
    flood_alone = [(s, f) for key, s, f in taken if s > last_small]
    assert max_in_flight(flood_alone) == 8
