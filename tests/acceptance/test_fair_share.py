"""Fair share with real worker processes: 8 claimers in 4 processes take a fair kind's jobs in turn.

Read back from the attempts the database recorded: each attempt's start (the claim's time), and
within one claim the jobs' turns.
"""

from __future__ import annotations

import pytest

import reliableq
from reliableq.models import Attempt, Job, JobStatus
from tests.support import late_by, wait_until

from .helpers import max_in_flight

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fair_kinds")]
FAIR = {"RELIABLEQ_TEST_FAIR": "1"}


def starts(kind: str) -> list[tuple[str | None, object, object]]:
    """(fair_key, started_at, finished_at) of every attempt of `kind`, in the order the claims took them."""
    rows = Attempt.objects.filter(job__kind=kind).order_by("started_at", "job__fair_seq", "job_id")
    return list(rows.values_list("job__fair_key", "started_at", "finished_at"))


def test_eight_claimers_in_four_processes_rotate_among_keys_and_keep_every_slot_busy(spawn_worker):
    reliableq.enqueue_many("test.fair", [{"seconds": 0.05}] * 300, fair_key="flood")
    small = [f"tenant-{n}" for n in range(5)]
    for key in small:
        reliableq.enqueue_many("test.fair", [{"seconds": 0.05}] * 12, fair_key=key)
    for _ in range(4):
        spawn_worker("--concurrency", "2", env=FAIR)

    done = lambda: Job.objects.filter(kind="test.fair", status=JobStatus.SUCCEEDED).count() == 360  # noqa: E731
    wait_until(done, timeout=120, what="every fair job to succeed")

    taken = starts("test.fair")
    order = [key for key, _, _ in taken]
    # Every key had due work from the start: the first 12 rounds interleave all six keys. A start is
    # ordered by its claim statement's time, which a loaded machine may hold back behind another
    # claimer's next turns: a round of slack (FIFO: the flood's 300 starts first).
    assert late_by(order, rounds=12) <= 2, order[:80]
    for key in small:
        assert max(i for i, k in enumerate(order) if k == key) < 6 * 12 + 8, (key, order[:80])
    # Work-conserving: once the small tenants are done, the flood alone fills all 8 slots.
    flood_alone = [(s, f) for key, s, f in taken[6 * 12 + 8 :]]
    assert max_in_flight(flood_alone) == 8
