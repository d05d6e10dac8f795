"""One seam for every change of a job's state for good (reliableq.queue.transitions).

A hook registered once must see, in the very statement that makes it, each of the six ways a
job ends or is reopened: the finish, the rescue of an expired lease, the release of a claim
whose commit was never acknowledged, a cancel, a purge, and a replay's reopening; and never a
job that only goes back to PENDING for a retry. Here the hook records into a temporary table of
the test's own connection, so a statement that skipped the seam leaves no row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import reliableq
from reliableq import queue as jobqueue
from reliableq import services
from reliableq.models import Job, JobStatus, Outcome
from reliableq.queue import Finish, db, transitions, workflows

from .helpers import claim_jobs, expire

pytestmark = pytest.mark.django_db


def seen() -> list[tuple[uuid.UUID, str, str]]:
    with db.cursor() as cursor:
        cursor.execute("SELECT job_id, status, change FROM pg_temp.seam_seen ORDER BY n")
        return list(cursor.fetchall())


@pytest.fixture
def probe() -> Iterator[None]:
    with db.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE seam_seen (n serial, job_id uuid, status text, change text)")

    def record(rows: str, change: str) -> str:
        return (
            f"seam_probe AS (INSERT INTO pg_temp.seam_seen (job_id, status, change)"
            f" SELECT id, status, '{change}' FROM {rows})"
        )

    with transitions.registered("probe", record):
        yield


def enqueue(kind: str = "demo.noop", **options: object) -> uuid.UUID:
    return reliableq.enqueue(kind, {}, **options).id  # type: ignore[arg-type]


def test_without_a_hook_the_seam_adds_nothing_to_a_statement() -> None:
    # The workflows' hook concerns members only: a finish of jobs alone leaves it out.
    assert transitions.after("moved", transitions.ENDED, members=False) == ""
    transitions.unregister("workflows")
    try:
        assert transitions.after("moved", transitions.ENDED) == ""
    finally:
        workflows.register()


def test_every_way_a_job_ends_or_is_reopened_goes_through_the_one_seam(probe: None) -> None:
    finished, retried, buried = enqueue(), enqueue(max_attempts=3), enqueue(max_attempts=1)
    taken = {job.id: job for job in claim_jobs(limit=10)}
    jobqueue.finish([
        Finish(job_id=finished, lease_token=taken[finished].lease_token, status=JobStatus.SUCCEEDED,
               outcome=Outcome.SUCCEEDED),
        Finish(job_id=retried, lease_token=taken[retried].lease_token, status=JobStatus.PENDING,
               outcome=Outcome.FAILED_TRANSIENT, error="try again", delay=60.0),
        Finish(job_id=buried, lease_token=taken[buried].lease_token, status=JobStatus.DEAD,
               outcome=Outcome.FAILED_PERMANENT, error="never"),
    ])  # fmt: skip
    assert seen() == [(finished, "SUCCEEDED", "ended"), (buried, "DEAD", "ended")]  # not the retry

    expired = enqueue(max_attempts=1)
    (job,) = claim_jobs()
    expire(job.id)
    jobqueue.rescue()
    assert seen()[-1] == (expired, "DEAD", "ended")

    orphan = enqueue(max_attempts=1)
    claim_jobs(worker_id="w-unheard")
    assert jobqueue.release_unacknowledged(worker_id="w-unheard", known=[]) == [orphan]
    assert seen()[-1] == (orphan, "DEAD", "ended")

    withdrawn = enqueue()
    services.cancel(withdrawn)
    assert seen()[-1] == (withdrawn, "CANCELLED", "ended")

    flooded = enqueue(queue="flood")
    assert services.purge("flood") == 1
    assert seen()[-1] == (flooded, "CANCELLED", "ended")

    services.replay(buried)
    assert seen()[-1] == (buried, "PENDING", "reopened")
    assert Job.objects.get(pk=buried).status == JobStatus.PENDING
    assert len(seen()) == 7  # two finishes, a rescue, a release, a cancel, a purge, a replay


def test_a_retry_or_a_snooze_that_goes_back_to_pending_is_not_an_end(probe: None) -> None:
    retried = enqueue(max_attempts=3)
    (job,) = claim_jobs()
    expire(job.id)
    jobqueue.rescue()  # attempts left: requeued

    assert Job.objects.get(pk=retried).status == JobStatus.PENDING
    assert seen() == []
