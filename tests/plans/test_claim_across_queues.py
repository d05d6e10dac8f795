"""A claim of several queues reads each queue's own best rows, and still claims the best across all of them."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import cast

import psycopg
import pytest
from django.db import connection
from django.db.models.functions import Now

from reliableq import queue as jobqueue
from reliableq.models import Attempt, Job, JobStatus
from testproject import dburl
from tests.factories import JobFactory


def claim_ids(queues: tuple[str, ...], limit: int) -> list[uuid.UUID]:
    jobs, _ = jobqueue.claim(worker_id="w-plans", queues=queues, limit=limit, lease_seconds=30, rescue=False)
    return [job.id for job in jobs]


def job(queue: str, priority: int, age: float) -> uuid.UUID:
    created = cast(Job, JobFactory(queue=queue, priority=priority))
    Job.objects.filter(pk=created.pk).update(run_at=Now() - dt.timedelta(seconds=age))
    return created.pk


@pytest.fixture
def other_connection(transactional_db: None) -> Iterator[psycopg.Connection]:
    conn = psycopg.connect(dburl.build(connection.settings_dict))
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


@pytest.mark.django_db
def test_a_claim_of_two_queues_takes_the_best_priority_then_the_oldest_across_both() -> None:
    mail_urgent = job("mail", -1, 10)
    reports_p0_old = job("reports", 0, 300)
    mail_p0 = job("mail", 0, 100)
    reports_p0_new = job("reports", 0, 20)
    mail_low = job("mail", 5, 1000)
    reports_low = job("reports", 7, 2000)

    assert claim_ids(("mail", "reports"), 4) == [mail_urgent, reports_p0_old, mail_p0, reports_p0_new]
    assert claim_ids(("reports", "mail"), 4) == [mail_low, reports_low]


@pytest.mark.django_db
def test_rows_a_queue_offered_but_the_claim_did_not_keep_are_left_as_they_were() -> None:
    kept = [job("mail", 0, 100), job("mail", 0, 90)]
    offered = [job("reports", 1, 300), job("reports", 1, 200)]  # each queue offers its best two
    before = {row["id"]: row for row in Job.objects.filter(pk__in=offered).values()}

    assert claim_ids(("mail", "reports"), 2) == kept

    assert {row["id"]: row for row in Job.objects.filter(pk__in=offered).values()} == before
    assert not Attempt.objects.filter(job_id__in=offered).exists()
    assert claim_ids(("mail", "reports"), 2) == offered


@pytest.mark.django_db
def test_a_queue_named_twice_is_read_once() -> None:
    jobs = [job("mail", 0, 30 - n) for n in range(3)]
    assert claim_ids(("mail", "mail"), 10) == jobs
    assert Attempt.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_claim_of_two_queues_skips_rows_another_transaction_holds(other_connection: psycopg.Connection) -> None:
    held = [job("mail", 0, 100), job("reports", 0, 90)]
    free = [job("mail", 0, 80), job("reports", 0, 70), job("mail", 0, 60)]
    other_connection.execute("SELECT id FROM reliableq_job WHERE id = ANY(%s) FOR UPDATE", (held,))

    assert claim_ids(("mail", "reports"), 10) == free
    assert set(Job.objects.filter(status=JobStatus.PENDING).values_list("pk", flat=True)) == set(held)
    other_connection.rollback()
    assert claim_ids(("mail", "reports"), 10) == held
