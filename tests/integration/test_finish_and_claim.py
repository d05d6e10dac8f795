"""A worker writes a batch's ends and claims into the slots they free in one transaction
(jobqueue.finish_and_claim): one commit where there were two. Each part keeps its fence, and
neither commits without the other."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import DatabaseError, connection

import reliableq
from reliableq import queue as jobqueue
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import Finish, db
from reliableq.registry import Limits

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "joined"


def claimed(n: int, total: int) -> list[Any]:
    for i in range(total):
        reliableq.enqueue("demo.noop", {"n": i}, queue=QUEUE)
    jobs, _ = jobqueue.claim(worker_id="w-joined", queues=(QUEUE,), limit=n, lease_seconds=30, rescue=False)
    assert len(jobs) == n
    return jobs


def success(job: Any, *, token: uuid.UUID | None = None) -> Finish:
    return Finish(
        job_id=job.id, lease_token=token or job.lease_token, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED
    )


def join(finishes: list[Finish], *, limit: int, **options: Any) -> tuple[Any, list[Any]]:
    claim = {"worker_id": "w-joined", "queues": (QUEUE,), "limit": limit, "lease_seconds": 30, **options}
    return jobqueue.finish_and_claim(finishes, **claim)


def writer_xid(job_id: uuid.UUID) -> str:
    """The transaction that last wrote the job's row."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM reliableq_job WHERE id = %s", [job_id])
        return cursor.fetchone()[0]


def test_the_ends_and_the_next_claim_commit_in_one_transaction() -> None:
    first = claimed(2, 4)
    result, taken = join([success(job) for job in first], limit=2)
    assert sorted(result.finalized) == sorted(job.id for job in first) and not result.lost
    assert len(taken) == 2 and not {job.id for job in taken} & {job.id for job in first}
    assert {Job.objects.get(pk=job.id).status for job in first} == {JobStatus.SUCCEEDED}
    assert {Job.objects.get(pk=job.id).status for job in taken} == {JobStatus.RUNNING}
    assert len({writer_xid(job.id) for job in [*first, *taken]}) == 1  # the same transaction wrote all four
    assert {a.outcome for a in Attempt.objects.filter(job_id__in=[j.id for j in first])} == {Outcome.SUCCEEDED}


def test_a_stale_token_finishes_nothing_and_the_claim_still_takes_its_jobs() -> None:
    [job] = claimed(1, 2)
    result, taken = join([success(job, token=uuid.uuid4())], limit=1)
    assert result.lost == [job.id] and not result.finalized
    row = Job.objects.get(pk=job.id)
    assert row.status == JobStatus.RUNNING and row.lease_token == job.lease_token  # the owner's, untouched
    assert len(taken) == 1 and taken[0].id != job.id


def test_when_the_claim_fails_the_ends_are_not_written_either() -> None:
    [job] = claimed(1, 2)
    # A lease no interval can hold: PostgreSQL refuses the claim's UPDATE, after the finish ran.
    with pytest.raises(DatabaseError):
        join([success(job)], limit=1, lease_seconds=1e300)
    row = Job.objects.get(pk=job.id)
    assert row.status == JobStatus.RUNNING and row.lease_token == job.lease_token
    assert Job.objects.filter(queue=QUEUE, status=JobStatus.PENDING).count() == 1
    # Written again, as the worker does with a batch whose statement failed, it passes its fence.
    result, taken = join([success(job)], limit=1)
    assert result.finalized == [job.id] and len(taken) == 1


def test_when_the_finish_fails_nothing_is_written_and_the_connection_serves_the_next_batch() -> None:
    first = claimed(2, 3)
    # A status the table refuses (reliableq_job_status_valid): PostgreSQL fails the finish itself,
    # sent with the transaction's BEGIN in one round trip.
    bogus = Finish(job_id=first[0].id, lease_token=first[0].lease_token, status="BOGUS", outcome=Outcome.SUCCEEDED)
    with pytest.raises(DatabaseError):
        join([bogus, success(first[1])], limit=2)
    assert {Job.objects.get(pk=job.id).status for job in first} == {JobStatus.RUNNING}
    assert Job.objects.filter(queue=QUEUE, status=JobStatus.PENDING).count() == 1
    result, taken = join([success(job) for job in first], limit=2)
    assert sorted(result.finalized) == sorted(job.id for job in first) and len(taken) == 1


def test_a_retry_due_at_once_can_be_claimed_again_by_the_same_transaction() -> None:
    [job] = claimed(1, 1)
    retry = Finish(
        job_id=job.id, lease_token=job.lease_token, status=JobStatus.PENDING, outcome=Outcome.FAILED_TRANSIENT,
        error="boom", delay=0.0,
    )  # fmt: skip
    result, taken = join([retry], limit=1)
    assert result.finalized == [job.id]
    [again] = taken
    assert again.id == job.id and again.attempt == 2 and again.lease_token != job.lease_token
    outcomes = list(Attempt.objects.filter(job_id=job.id).order_by("number").values_list("number", "outcome"))
    assert outcomes == [(1, Outcome.FAILED_TRANSIENT), (2, JobStatus.RUNNING)]


def test_a_claim_of_a_limited_kind_is_not_joined_to_a_finish() -> None:
    assert jobqueue.single_statement({"demo.fair": Limits(fair=True)})  # fair alone: still one statement
    assert not jobqueue.single_statement({"demo.capped": Limits(max_running=2)})
    with pytest.raises(ValueError, match="one statement"):
        join([], limit=1, limits={"demo.capped": Limits(max_running=2)})


def test_only_a_database_on_this_machine_is_near(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = db.connection().settings_dict
    # The test database: a unix socket, or 127.0.0.1 (the system PostgreSQL), reached directly.
    assert jobqueue.joins() is True
    for far in ("db.internal", "10.0.0.7", "pg.example.com"):
        monkeypatch.setitem(settings, "HOST", far)
        assert db.nearby() is False, far
    # (The connection is open already: the host is only read, as the worker's decision reads it.)
    for near in ("", "/var/run/postgresql", "localhost", "127.0.0.1", "::1", "[::1]"):
        monkeypatch.setitem(settings, "HOST", near)
        assert db.nearby() is True, near
