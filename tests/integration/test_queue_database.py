"""The queue on a database of its own (RELIABLEQ["DATABASE"]): the package's queries and transactions
go there and nowhere else, a transaction on another database is not joined, and enqueue_on_commit
waits for one.

Tests marked `own_database` need the queue on an alias other than default: CI runs the integration
suite a second time with QUEUE_DATABASE_URL=embedded (a second PostgreSQL cluster) for them. The
enqueue_on_commit tests run either way.
"""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections, transaction
from django.test import Client
from prometheus_client import generate_latest
from rest_framework.test import APIClient

import reliableq
from reliableq import metrics, scheduler, schedules, services, testing
from reliableq import queue as jobqueue
from reliableq.errors import UnknownKind
from reliableq.models import Job, JobStatus, Schedule
from reliableq.queue import db, health, horizon, leadership, stats

from .helpers import claim_jobs, expire, raw_connect

QUEUE = db.alias()
own_database = pytest.mark.skipif(
    QUEUE == "default", reason="the queue is on the default database; QUEUE_DATABASE_URL=embedded gives it its own"
)


class Rollback(Exception):
    pass


def stored(**lookup: object) -> int:
    """How many jobs match, read on a connection of its own: committed rows only."""
    where = " AND ".join(f"{column} = %s" for column in lookup)
    with raw_connect(autocommit=True) as conn:
        return conn.execute(f"SELECT count(*) FROM reliableq_job WHERE {where}", list(lookup.values())).fetchone()[0]


def tables(alias: str) -> set[str]:
    with connections[alias].cursor() as cursor:
        return set(connections[alias].introspection.table_names(cursor))


@own_database
@pytest.mark.django_db
def test_the_queues_tables_live_on_its_database_and_nothing_else_does() -> None:
    queue_tables = tables(QUEUE) - {"django_migrations"}
    assert {"reliableq_job", "reliableq_attempt", "reliableq_returnvalue", "reliableq_leader"} <= queue_tables
    assert {t for t in queue_tables if not t.startswith("reliableq_")} == set()  # QueueRouter: only the queue
    assert {t for t in tables("default") if t.startswith("reliableq_")} == set()
    assert connections[QUEUE].settings_dict["HOST"] != connections["default"].settings_dict["HOST"] or (
        connections[QUEUE].settings_dict["PORT"] != connections["default"].settings_dict["PORT"]
    ), "the alias run puts the queue on a second PostgreSQL cluster"


# Django refuses every query to a database a test does not list: each call below would fail if it
# touched default (in this thread; tests/acceptance/test_queue_database.py runs a worker whose
# default database cannot be reached at all).
@own_database
@pytest.mark.django_db(transaction=True, databases=[QUEUE])
def test_the_package_works_with_the_default_database_refused() -> None:
    job = reliableq.enqueue("demo.noop", {"n": 1}, dedupe_key="k")
    assert reliableq.enqueue("demo.noop", {"n": 1}, dedupe_key="k").pk == job.pk
    reliableq.enqueue_many("demo.noop", [{"n": 2}, {"n": 3}], queue="bulk")
    services.submit_many([services.NewJob(kind="test.permanent", payload={})])
    doomed = reliableq.enqueue("demo.noop", {"n": 4}, queue="doomed")
    services.cancel(doomed.pk)
    claimed, _ = jobqueue.claim(worker_id="w1", queues=["default", "bulk"], limit=2, lease_seconds=30, caps={"x": 1})
    assert set(jobqueue.renew([(c.id, c.lease_token) for c in claimed], lease_seconds=30)) == {c.id for c in claimed}
    expire(claimed[0].id)
    assert [r.job_id for r in jobqueue.rescue()] == [claimed[0].id]
    assert jobqueue.finish(
        [
            jobqueue.Finish(job_id=c.id, lease_token=c.lease_token, status="SUCCEEDED", outcome="SUCCEEDED")
            for c in claimed[1:]
        ]
    ).finalized
    assert services.has_work(["default", "bulk"])
    ran = testing.drain()
    dead = next(r.job_id for r in ran if r.status == JobStatus.DEAD)
    assert services.replay(dead).status == JobStatus.PENDING
    token = leadership.lead("maintenance", holder="w1", seconds=5, token=None)
    assert token is not None and leadership.resign("maintenance", token=token)
    schedules.sync()
    schedules.save(Schedule(name="alias", kind="demo.noop", cron="* * * * * *"))
    scheduler.serve(late_seconds=16)
    assert schedules.run_now("alias").kind == "demo.noop"
    assert schedules.set_enabled("alias", False).next_slot is None
    jobqueue.guard_claims(["default"])
    assert services.retain() == {"SUCCEEDED": 0, "CANCELLED": 0, "DEAD": 0}
    snapshot = stats.snapshot()
    assert snapshot["by_status"][JobStatus.SUCCEEDED] >= 3
    stats.last_hour(), stats.finished_per_minute(), stats.backlog_per_minute(), stats.p95_by_kind()
    assert b"reliableq_jobs" in generate_latest(metrics.registry())
    horizon.horizon(), horizon.dead_tuples()
    health._migrated = False
    assert health.problems() == []
    call_command("reliableq_stats", stdout=StringIO())
    call_command("prunejobs", "--older-than", "1d", stdout=StringIO())


@own_database
@pytest.mark.django_db(transaction=True)
def test_a_transaction_on_the_default_database_is_not_joined_by_enqueue() -> None:
    with pytest.raises(Rollback), transaction.atomic(using="default"):
        job = reliableq.enqueue("demo.noop", {})
        assert stored(id=job.pk) == 1  # committed already, in autocommit on the queue's database
        raise Rollback
    assert stored(id=job.pk) == 1  # the caller's rollback does not reach it


@pytest.mark.django_db(transaction=True)
def test_a_transaction_on_the_queues_database_is_joined_by_enqueue() -> None:
    with pytest.raises(Rollback), transaction.atomic(using=QUEUE):
        job = reliableq.enqueue("demo.noop", {})
        assert stored(id=job.pk) == 0
        raise Rollback
    assert stored(id=job.pk) == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_stores_the_job_only_once_the_callers_transaction_commits() -> None:
    key = uuid.uuid4().hex
    with transaction.atomic(using="default"):
        assert reliableq.enqueue_on_commit("demo.noop", {"n": 1}, dedupe_key=key) is None
        assert stored(dedupe_key=key) == 0
    assert stored(dedupe_key=key) == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_stores_nothing_when_the_callers_transaction_rolls_back() -> None:
    key = uuid.uuid4().hex
    with pytest.raises(Rollback), transaction.atomic(using="default"):
        reliableq.enqueue_on_commit("demo.noop", {}, dedupe_key=key)
        raise Rollback
    with transaction.atomic(using="default"):
        pass  # a later commit runs no callback of the rolled-back block
    assert stored(dedupe_key=key) == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_checks_the_job_at_the_call_and_keeps_the_payload_as_it_was() -> None:
    key = uuid.uuid4().hex
    payload = {"items": [1]}
    with transaction.atomic(using="default"):
        with pytest.raises(UnknownKind):
            reliableq.enqueue_on_commit("no.such.kind", {})
        with pytest.raises(reliableq.InvalidJob):
            reliableq.enqueue_on_commit("demo.noop", {}, queue="bad queue name!")
        reliableq.enqueue_on_commit("demo.noop", payload, dedupe_key=key)
        payload["items"].append(2)  # after the call: not what is stored
    assert Job.objects.get(dedupe_key=key).payload == {"items": [1]}
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_outside_a_transaction_enqueues_at_once() -> None:
    key = uuid.uuid4().hex
    reliableq.enqueue_on_commit("demo.noop", {}, dedupe_key=key)
    assert stored(dedupe_key=key) == 1


@own_database
@pytest.mark.django_db
def test_the_admin_shows_the_queues_jobs_and_audits_a_replay_on_the_default_database() -> None:
    operator = User.objects.create_superuser("operator", password="x")
    dead = reliableq.enqueue("test.permanent", {})
    testing.run_due()
    client = Client()
    client.force_login(operator)
    assert str(dead.pk)[-8:] in client.get("/admin/reliableq/job/").content.decode()
    page = client.get(f"/admin/reliableq/job/{dead.pk}/change/").content.decode()
    assert "FAILED_PERMANENT" in page  # the attempt history, read from the queue's database
    assert client.get("/admin/reliableq/queuedashboard/").status_code == 200
    response = client.post(f"/admin/reliableq/job/{dead.pk}/replay/", {"confirm": "yes"})
    assert response.status_code == 302
    assert Job.objects.get(pk=dead.pk).status == JobStatus.PENDING
    entry = LogEntry.objects.using("default").get(object_id=str(dead.pk))
    assert (entry.user_id, entry.change_message) == (operator.pk, services.REPLAYED)


@own_database
@pytest.mark.django_db
def test_the_api_reads_users_on_default_and_jobs_on_the_queues_database() -> None:
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("api", password="x"))
    response = client.post("/v1/jobs", {"kind": "demo.noop", "payload": {"n": 1}}, format="json")
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    assert Job.objects.get(pk=job_id).queue == "default"
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "PENDING"
    assert claim_jobs()[0].id == uuid.UUID(job_id)
