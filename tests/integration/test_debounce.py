"""debounce= with unique_key: a PENDING job's payload replaced and its start moved, by database time,
in one statement that a RUNNING job's fence keeps out; many processes racing on one key make one job."""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

import reliableq
from reliableq import services
from reliableq.errors import InvalidJob
from reliableq.models import Job, JobStatus
from reliableq.options import JobOptions
from reliableq.queue import db
from reliableq.testing import run_due
from tests.support import worker_env

from .helpers import claim_jobs, make_due

ROOT = Path(__file__).resolve().parents[2]
KEY = {"unique_key": "digest:7"}
SECONDS = dt.timedelta(seconds=1)


def shift_created_at(job_id: object, seconds: float) -> None:
    """Pretend the job was first enqueued `seconds` earlier (the cap counts from created_at)."""
    Job.objects.filter(pk=job_id).update(created_at=F("created_at") - dt.timedelta(seconds=seconds))


@pytest.mark.django_db(transaction=True)
def test_debounce_replaces_a_pending_jobs_payload_and_moves_its_start() -> None:
    first = reliableq.enqueue("demo.noop", {"n": 1}, debounce=30, **KEY)
    assert first.run_at - first.created_at == 30 * SECONDS  # one now(): the INSERT's

    again = reliableq.enqueue("demo.noop", {"n": 2}, debounce=30, **KEY)

    stored = Job.objects.get()
    assert again.pk == first.pk == stored.pk and stored.status == JobStatus.PENDING
    assert stored.payload == {"n": 2} and again.payload == {"n": 2}
    assert stored.run_at - stored.updated_at == 30 * SECONDS and stored.run_at > first.run_at
    assert stored.created_at == first.created_at  # the first enqueue, which debounce_max counts from
    fields = [f.attname for f in Job._meta.concrete_fields]
    assert [getattr(again, f) for f in fields] == [getattr(stored, f) for f in fields]  # as a read gives it


@pytest.mark.django_db(transaction=True)
def test_without_debounce_the_unique_key_keeps_the_first_payload() -> None:
    reliableq.enqueue("demo.noop", {"n": 1}, debounce=30, **KEY)
    plain = reliableq.enqueue("demo.noop", {"n": 2}, **KEY)
    assert plain.payload == {"n": 1} and Job.objects.get().payload == {"n": 1}


@pytest.mark.django_db(transaction=True)
def test_debounce_max_caps_the_start_at_that_long_after_the_first_enqueue() -> None:
    job = reliableq.enqueue("demo.noop", {"n": 1}, debounce=30, debounce_max=40, **KEY)
    shift_created_at(job.pk, 20)  # first enqueued 20 s ago: 30 s more would pass the 40 s cap

    reliableq.enqueue("demo.noop", {"n": 2}, debounce=30, debounce_max=40, **KEY)

    capped = Job.objects.get()
    assert capped.run_at - capped.created_at == 40 * SECONDS and capped.payload == {"n": 2}

    shift_created_at(job.pk, 60)  # the cap is behind us: due now, never in the past
    reliableq.enqueue("demo.noop", {"n": 3}, debounce=30, debounce_max=40, **KEY)
    due = Job.objects.get()
    assert due.run_at == due.updated_at and due.payload == {"n": 3}


@pytest.mark.django_db(transaction=True)
def test_a_running_jobs_key_returns_that_job_untouched_and_a_finished_one_makes_a_new_job() -> None:
    job = reliableq.enqueue("demo.noop", {"n": 1}, debounce=30, **KEY)
    make_due(job.pk)
    [claimed] = claim_jobs(worker_id="w-test", queues=("default",), limit=1, lease_seconds=30)
    before = Job.objects.get()
    assert claimed.id == job.pk and before.status == JobStatus.RUNNING

    again = reliableq.enqueue("demo.noop", {"n": 2}, debounce=30, **KEY)

    after = Job.objects.get()
    assert again.pk == job.pk and again.status == JobStatus.RUNNING
    assert (after.payload, after.run_at, after.updated_at) == (before.payload, before.run_at, before.updated_at)

    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, lease_token=None, finished_at=timezone.now())
    new = reliableq.enqueue("demo.noop", {"n": 3}, debounce=30, **KEY)
    assert new.pk != job.pk and new.payload == {"n": 3} and Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_debounced_job_runs_once_with_the_last_payload() -> None:
    for n in range(3):
        reliableq.enqueue("demo.noop", {"n": n}, debounce=0.001, **KEY)
    make_due(Job.objects.get().pk)
    [ran] = run_due()
    done = Job.objects.get()
    assert ran.status == done.status == JobStatus.SUCCEEDED and done.payload == {"n": 2}


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_debounces_when_the_transaction_commits() -> None:
    with transaction.atomic():
        reliableq.enqueue_on_commit("demo.noop", {"n": 1}, debounce=30, **KEY)
        reliableq.enqueue_on_commit("demo.noop", {"n": 2}, debounce=30, **KEY)
        assert not Job.objects.exists()
        with pytest.raises(InvalidJob) as caught:
            reliableq.enqueue_on_commit("demo.noop", {"n": 3}, debounce=-1, **KEY)
        assert caught.value.field == "debounce"
    stored = Job.objects.get()
    assert stored.payload == {"n": 2} and stored.run_at - stored.updated_at == 30 * SECONDS


@pytest.mark.django_db(transaction=True)
def test_a_users_submission_cannot_debounce() -> None:
    from django.contrib.auth.models import User

    user = User.objects.create(username="alice")
    with pytest.raises(InvalidJob) as caught:
        services.submit("demo.noop", {}, JobOptions(debounce=5, unique_key="k"), submitted_by=user)
    assert caught.value.field == "debounce" and not Job.objects.exists()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"debounce": 0, **KEY}, "debounce"),
        ({"debounce": -1, **KEY}, "debounce"),
        ({"debounce": math.nan, **KEY}, "debounce"),
        ({"debounce": math.inf, **KEY}, "debounce"),
        ({"debounce": True, **KEY}, "debounce"),
        ({"debounce": "5", **KEY}, "debounce"),
        ({"debounce": 400 * 86400, **KEY}, "debounce"),
        ({"debounce": 5}, "debounce"),  # no unique_key: nothing to debounce against
        ({"debounce_max": 5, **KEY}, "debounce_max"),
        ({"debounce": 5, "debounce_max": 4, **KEY}, "debounce_max"),
        ({"debounce": 5, "debounce_max": "9", **KEY}, "debounce_max"),
        ({"debounce": 5, "dedupe_key": "d", **KEY}, "dedupe_key"),
        ({"debounce": 5, "run_at": timezone.now(), **KEY}, "run_at"),
    ],
)
def test_bad_debounce_options_raise_invalid_job_naming_the_field(options: dict, field: str) -> None:
    with pytest.raises(InvalidJob) as caught:
        reliableq.enqueue("demo.noop", {}, **options)
    assert caught.value.field == field


def test_the_bulk_and_workflow_forms_take_no_debounce() -> None:
    with pytest.raises(TypeError, match="debounce"):
        reliableq.enqueue_many("demo.noop", [{}], debounce=5)
    with pytest.raises(TypeError, match="debounce"):
        reliableq.workflow().add("demo.noop", {}, debounce=5)


@pytest.mark.django_db(transaction=True)
def test_many_processes_debouncing_one_key_at_once_leave_one_job_with_the_last_payload(db_url: str) -> None:
    """Four processes past a start barrier, each enqueueing its own payload on one key in a transaction
    of its own: one job, and its payload is the last committer's (the row's xmin is that writer's
    transaction). Each process is a Django start-up: seconds, the test's whole cost."""
    racers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.integration.debounce_racer", str(n)],
            cwd=ROOT,
            env=worker_env(db_url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    try:
        for racer in racers:  # the barrier: every process connected before any enqueues
            assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        seen = [json.loads(racer.communicate(timeout=60)[0]) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
            racer.wait()
    assert all(racer.returncode == 0 for racer in racers)

    [job] = Job.objects.all()
    assert {s["id"] for s in seen} == {str(job.pk)}
    with db.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM reliableq_job WHERE id = %s", [job.pk])
        (last_writer,) = cursor.fetchone()
    [last] = [s for s in seen if s["txid"] == last_writer]
    assert job.payload == {"n": last["payload"]["n"]} and job.status == JobStatus.PENDING
