"""enqueue_many: one INSERT for many jobs, in the caller's transaction, with one wake-up."""

from __future__ import annotations

import datetime as dt

import pytest

import reliableq
from reliableq.errors import UnknownKind
from reliableq.models import Job, JobStatus
from reliableq.queue import db
from reliableq.services import InvalidJob, enqueue_many

from .helpers import claim_jobs, db_now, raw_connect


class Rollback(Exception):
    pass


@pytest.mark.django_db
def test_enqueue_many_stores_every_payload_as_a_pending_job_in_order() -> None:
    before = db_now()
    ids = reliableq.enqueue_many("test.flaky", [{"n": i} for i in range(5)], queue="bulk", priority=-2)
    assert len(ids) == len(set(ids)) == 5
    rows = {j.id: j for j in Job.objects.filter(id__in=ids)}
    assert [rows[i].payload for i in ids] == [{"n": i} for i in range(5)]
    for job in rows.values():
        assert (job.kind, job.queue, job.priority, job.status) == ("test.flaky", "bulk", -2, JobStatus.PENDING)
        assert (job.attempts, job.max_attempts) == (0, 5)
        assert job.lease_token is None and job.finished_at is None and job.dedupe_key is None
        assert job.run_at == job.created_at == before  # database time, the caller's transaction
    assert {j.id for j in claim_jobs(queues=["bulk"], limit=10)} == set(ids)


@pytest.mark.django_db
def test_enqueue_many_takes_budget_run_at_and_none_payloads() -> None:
    later = db_now() + dt.timedelta(hours=1)
    ids = enqueue_many("test.stuck", [None, {}], max_attempts=9, run_at=later)
    assert {(j.payload == {}, j.max_attempts, j.run_at) for j in Job.objects.filter(id__in=ids)} == {(True, 9, later)}
    assert enqueue_many("demo.noop", []) == []


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_joins_the_callers_transaction_and_wakes_the_queue_once_on_commit() -> None:
    with raw_connect(autocommit=True) as listener:
        listener.execute("LISTEN reliableq")
        with pytest.raises(Rollback), db.atomic():
            rolled_back = enqueue_many("demo.noop", [{}, {}], queue="bulk-tx")
            raise Rollback
        assert not Job.objects.filter(id__in=rolled_back).exists()
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        with db.atomic():
            kept = enqueue_many("demo.noop", [{}] * 3, queue="bulk-tx")
        notes = list(listener.notifies(timeout=1.0, stop_after=5))
    assert Job.objects.filter(id__in=kept).count() == 3
    assert [n.payload for n in notes] == ["bulk-tx"]


@pytest.mark.django_db
def test_enqueue_many_validates_like_enqueue_and_stores_nothing_on_error() -> None:
    with pytest.raises(UnknownKind):
        enqueue_many("no.such.kind", [{}])
    with pytest.raises(InvalidJob):
        enqueue_many("demo.noop", [{}, ["not", "a", "dict"]])  # type: ignore[list-item]
    with pytest.raises(InvalidJob):
        enqueue_many("demo.noop", [{"x": float("nan")}])
    with pytest.raises(InvalidJob):
        enqueue_many("demo.noop", [{}], max_attempts=0)
    with pytest.raises(InvalidJob):
        enqueue_many("demo.noop", [{}], run_at=dt.datetime(2030, 1, 1))
    assert not Job.objects.filter(kind="demo.noop").exists()


@pytest.mark.django_db
def test_enqueue_many_takes_every_option_of_enqueue_but_the_keys_of_one_job(per_key_kind: None) -> None:
    """One JobOptions for every way in: a concurrency_key applies to each job of the batch."""
    ids = reliableq.enqueue_many("test.per_key", [{}, {}], concurrency_key="acct-7", queue="bulk")
    assert set(Job.objects.filter(id__in=ids).values_list("concurrency_key", "queue")) == {("acct-7", "bulk")}

    for option in ("dedupe_key", "unique_key"):
        with pytest.raises(TypeError, match=rf"enqueue_many\(\) got unexpected option\(s\) {option}; its options"):
            reliableq.enqueue_many("demo.noop", [{}], **{option: "k"})
    with pytest.raises(TypeError, match=r"enqueue\(\) got unexpected option\(s\) queues; its options are queue, "):
        reliableq.enqueue("demo.noop", {}, queues="default")  # type: ignore[call-arg]
    with pytest.raises(InvalidJob, match="no max_running_per_key"):
        reliableq.enqueue_many("demo.noop", [{}], concurrency_key="acct-7")
