"""enqueue: joins the caller's transaction, takes time from the database, dedupes in one INSERT."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
from django.db import transaction
from django.utils import timezone

import reliableq
from reliableq.errors import UnknownKind
from reliableq.models import Job, JobStatus
from reliableq.options import JobOptions
from reliableq.queue import db
from reliableq.services import InvalidJob, enqueue, submit
from tests.support import wait_until

from .helpers import claim_jobs, db_clock, db_now, in_thread, lock_waiters, raw_connect, spawn


class Rollback(Exception):
    pass


def count_from_another_connection(job_id: uuid.UUID) -> int:
    with raw_connect(autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM reliableq_job WHERE id = %s", (job_id,)).fetchone()[0]


@pytest.mark.django_db
def test_enqueue_stores_a_pending_job_with_the_kinds_budget() -> None:
    job = reliableq.enqueue("test.flaky", {"failures": 2}, queue="mail", priority=-3)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.kind, stored.payload, stored.queue, stored.priority) == ("test.flaky", {"failures": 2}, "mail", -3)
    assert (stored.status, stored.attempts, stored.max_attempts) == (JobStatus.PENDING, 0, 5)
    assert stored.lease_token is None and stored.lease_expires_at is None and stored.finished_at is None
    assert stored.effect_key == f"reliableq:test.flaky:{job.pk}"
    # What enqueue returned is what the database holds.
    assert (job.payload, job.status, job.run_at, job.created_at) == (
        stored.payload,
        stored.status,
        stored.run_at,
        stored.created_at,
    )


@pytest.mark.django_db
def test_budget_defaults_to_the_setting_for_a_kind_without_one_and_can_be_given() -> None:
    assert enqueue("demo.noop").max_attempts == 5  # RELIABLEQ["MAX_ATTEMPTS"]
    assert enqueue("test.stuck").max_attempts == 2  # the handler's own budget
    assert enqueue("test.stuck", max_attempts=9).max_attempts == 9


@pytest.mark.django_db
def test_run_at_defaults_to_database_time() -> None:
    before = db_now()
    job = enqueue("demo.noop", {})
    after = db_clock()
    assert before <= job.run_at <= after
    assert job.run_at == Job.objects.get(pk=job.pk).run_at
    assert job.run_at == before  # now() of the caller's transaction, not the Python clock
    assert job.created_at == before


@pytest.mark.django_db
def test_explicit_aware_run_at_is_kept() -> None:
    later = timezone.now() + dt.timedelta(hours=2)
    job = enqueue("demo.noop", {}, run_at=later)
    assert Job.objects.get(pk=job.pk).run_at == later
    assert claim_jobs() == []  # not due yet


@pytest.mark.django_db
def test_dedupe_key_returns_the_existing_job_and_makes_one_row() -> None:
    first, created_first = submit("demo.noop", {"a": 1}, JobOptions(dedupe_key="order-42"))
    second, created_second = submit("demo.noop", {"a": 1}, JobOptions(dedupe_key="order-42"))
    third = enqueue("demo.noop", {"something": "else"}, dedupe_key="order-42")
    assert (created_first, created_second) == (True, False)
    assert first.pk == second.pk == third.pk
    assert third.payload == {"a": 1}  # the stored job, not the second request
    assert Job.objects.filter(dedupe_key="order-42").count() == 1
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_jobs_without_dedupe_key_are_never_deduplicated() -> None:
    a = enqueue("demo.noop", {"same": True})
    b = enqueue("demo.noop", {"same": True})
    assert a.pk != b.pk
    assert Job.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"payload": [1, 2]}, InvalidJob, "payload must be a JSON object"),
        ({"payload": "text"}, InvalidJob, "payload must be a JSON object"),
        ({"payload": {"when": object()}}, InvalidJob, "not JSON-serializable"),
        ({"payload": {"x": float("nan")}}, InvalidJob, "not JSON-serializable"),
        ({"payload": {"x": float("inf")}}, InvalidJob, "not JSON-serializable"),
        ({"run_at": dt.datetime(2030, 1, 1, 12, 0)}, InvalidJob, "run_at must be timezone-aware"),
        ({"max_attempts": 0}, InvalidJob, "max_attempts must be at least 1"),
        ({"max_attempts": -2}, InvalidJob, "max_attempts must be at least 1"),
        ({"queue": ""}, InvalidJob, "queue must be a non-empty name"),
        ({"queue": "q" * 101}, InvalidJob, "at most 100 characters"),
        ({"kind": "no.such.kind"}, UnknownKind, "No handler is registered for kind 'no.such.kind'"),
        ({"kind": "no.such.kind", "max_attempts": 3}, UnknownKind, "No handler is registered"),
        # What PostgreSQL would refuse with a DataError, or a worker could never serve: refused first.
        ({"payload": {"note": "a\x00b"}}, InvalidJob, "NUL"),
        ({"payload": {"k\x00": 1}}, InvalidJob, "NUL"),
        ({"payload": {"s": "\ud800"}}, InvalidJob, "unpaired surrogates"),
        ({"dedupe_key": "k" * 300}, InvalidJob, "at most 255 characters"),
        ({"dedupe_key": "a\x00b"}, InvalidJob, "NUL"),
        ({"queue": "a b"}, InvalidJob, "letters, digits and _.:- only"),
        ({"priority": 2**31}, InvalidJob, "priority must be an integer from -1000 to 1000"),
        ({"max_attempts": 101}, InvalidJob, "at most 100"),
        ({"payload": {"blob": "x" * 70_000}}, InvalidJob, "MAX_PAYLOAD_BYTES"),
        ({"run_at": dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc)}, InvalidJob, "MAX_SCHEDULE_SECONDS"),
    ],
    ids=[
        "payload-list",
        "payload-str",
        "payload-object",
        "payload-nan",
        "payload-inf",
        "naive-run_at",
        "max_attempts-0",
        "max_attempts-negative",
        "queue-empty",
        "queue-long",
        "unknown-kind",
        "unknown-kind-with-budget",
        "payload-nul",
        "payload-key-nul",
        "payload-surrogate",
        "dedupe_key-long",
        "dedupe_key-nul",
        "queue-unservable",
        "priority-huge",
        "max_attempts-101",
        "payload-too-large",
        "run_at-year-9999",
    ],
)
def test_invalid_jobs_are_refused_with_a_clear_error(kwargs: dict, error: type[Exception], message: str) -> None:
    kind = kwargs.pop("kind", "demo.noop")
    payload = kwargs.pop("payload", {})
    with pytest.raises(error, match=message) as raised:
        enqueue(kind, payload, **kwargs)
    assert isinstance(raised.value, reliableq.ReliableQError)
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_a_deep_payload_is_refused_as_invalid_not_a_recursion_error() -> None:
    deep: dict = {}
    for _ in range(5000):
        deep = {"n": deep}
    with pytest.raises(InvalidJob, match="nested more than 64 levels"):
        enqueue("demo.noop", deep)


@pytest.mark.django_db(transaction=True)
def test_job_enqueued_in_a_rolled_back_transaction_never_exists() -> None:
    with pytest.raises(Rollback), db.atomic():
        job = enqueue("demo.noop", {"n": 1})
        assert Job.objects.filter(pk=job.pk).exists()  # visible to its own transaction
        assert count_from_another_connection(job.pk) == 0  # and to no one else
        raise Rollback
    assert not Job.objects.filter(pk=job.pk).exists()
    assert count_from_another_connection(job.pk) == 0
    assert in_thread(claim_jobs) == []


@pytest.mark.django_db(transaction=True)
def test_job_enqueued_in_a_committed_transaction_exists_for_every_connection() -> None:
    with db.atomic():
        job = enqueue("demo.noop", {"n": 1})
    assert count_from_another_connection(job.pk) == 1


@pytest.mark.django_db(transaction=True)
def test_uncommitted_enqueue_is_invisible_to_a_claimer_on_another_connection() -> None:
    with db.atomic():
        job = enqueue("demo.noop", {"n": 1})
        assert in_thread(claim_jobs) == []
    claimed = in_thread(claim_jobs)
    assert [c.id for c in claimed] == [job.pk]


@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueue_with_one_dedupe_key_makes_one_row() -> None:
    threads = 12
    barrier = threading.Barrier(threads)

    def submit_once(n: int) -> uuid.UUID:
        barrier.wait(timeout=30)
        return enqueue("demo.noop", {"n": 1}, dedupe_key="race-key").pk

    futures = [spawn(submit_once, n) for n in range(threads)]
    ids = [f.result(timeout=60) for f in futures]
    assert len(set(ids)) == 1
    assert Job.objects.filter(dedupe_key="race-key").count() == 1
    assert Job.objects.get().pk == ids[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("holder_commits", [True, False], ids=["holder-commits", "holder-rolls-back"])
def test_dedupe_waits_for_the_uncommitted_holder_of_the_key(holder_commits: bool) -> None:
    inserted, release = threading.Event(), threading.Event()

    def holder() -> uuid.UUID:
        with db.atomic():
            job = enqueue("demo.noop", {"who": "holder"}, dedupe_key="held-key")
            inserted.set()
            assert release.wait(timeout=30)
            if not holder_commits:
                transaction.set_rollback(True, using=db.alias())
        return job.pk

    holding = spawn(holder)
    assert inserted.wait(timeout=30)
    waiting = spawn(enqueue, "demo.noop", {"who": "waiter"}, dedupe_key="held-key")
    # The waiter's INSERT ... ON CONFLICT blocks on the holder's uncommitted row.
    wait_until(lambda: lock_waiters() >= 1, timeout=10, what="the second enqueue to wait for the key")
    assert not waiting.done()
    release.set()
    holder_id = holding.result(timeout=30)
    waiter_job = waiting.result(timeout=30)
    assert Job.objects.filter(dedupe_key="held-key").count() == 1
    stored = Job.objects.get(dedupe_key="held-key")
    if holder_commits:
        assert waiter_job.pk == holder_id == stored.pk
        assert stored.payload == {"who": "holder"}
    else:
        assert waiter_job.pk != holder_id
        assert waiter_job.pk == stored.pk
        assert stored.payload == {"who": "waiter"}


@pytest.mark.django_db
def test_every_way_of_making_a_job_gives_it_a_time_ordered_id() -> None:
    """Version 7 ids keep a job's primary-key entries at the index's right edge (reliableq.ids)."""
    from reliableq.services import NewJob, submit_many

    made = [
        enqueue("test.flaky", {}),
        submit("test.flaky", {})[0],
        *Job.objects.filter(id__in=reliableq.enqueue_many("test.flaky", [{}, {}])),
        *submit_many([NewJob(kind="test.flaky", payload={})])[0],
        Job.objects.create(kind="test.flaky"),
    ]

    assert [job.id.version for job in made] == [7] * len(made)


@pytest.mark.django_db
def test_the_job_enqueue_and_a_batch_hand_back_is_what_a_read_of_its_row_gives() -> None:
    """The returned Job is built from the insert, not read: every column (services.stored_job) must match."""
    from django.forms.models import model_to_dict

    from reliableq.services import NewJob, submit_many

    def columns(job: Job) -> dict[str, object]:
        values = model_to_dict(job, fields=[f.name for f in Job._meta.concrete_fields if f.name != "fair_seq"])
        return {**values, "id": job.pk, "created_at": job.created_at, "updated_at": job.updated_at}

    one = enqueue("test.flaky", {"failures": 1}, queue="mail", priority=2, dedupe_key="read-me")
    made, _ = submit_many([NewJob(kind="test.flaky", payload={"n": n}) for n in range(2)], key="batch-read-me")
    for job in [one, *made]:
        assert columns(job) == columns(Job.objects.get(pk=job.pk))
