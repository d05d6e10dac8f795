"""Observing a job's journey (issue 30): signals, OpenTelemetry traces across processes, progress, results,
structured logs. Real worker processes, the real OpenTelemetry SDK."""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from opentelemetry import trace
from rest_framework.test import APIClient

import reliableq
from reliableq import queue as jobqueue
from reliableq import signals
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import Finish, db
from testproject import accounts, otel

from .helpers import is_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- signals ----------------------------------------------------------------------------------------


def test_job_enqueued_is_sent_once_the_job_commits_and_never_for_a_rolled_back_one():
    seen: list[dict[str, Any]] = []

    def receive(sender: Any, **fields: Any) -> None:
        seen.append({**fields, "committed": Job.objects.filter(pk=fields["job_id"]).exists()})

    signals.job_enqueued.connect(receive, weak=False)
    try:
        with transaction.atomic(using=db.alias()):
            kept = reliableq.enqueue("demo.noop", {})
            assert seen == [], "sent before the commit"
        with pytest.raises(RuntimeError), transaction.atomic(using=db.alias()):
            reliableq.enqueue("demo.noop", {"n": 2})
            raise RuntimeError("roll back")
        many = reliableq.enqueue_many("demo.noop", [{}, {}], queue="bulk")
    finally:
        signals.job_enqueued.disconnect(receive)

    assert [(s["job_id"], s["kind"], s["queue"], s["committed"]) for s in seen] == [
        (kept.id, "demo.noop", "default", True),
        (many[0], "demo.noop", "bulk", True),
        (many[1], "demo.noop", "bulk", True),
    ]


def test_job_started_and_job_finished_come_from_the_worker_after_the_finish_commits(spawn_worker, tmp_path):
    record = tmp_path / "signals.jsonl"
    ok = reliableq.enqueue("demo.noop", {})
    flaky = reliableq.enqueue("test.flaky", {"failures": 1})
    worker = spawn_worker("--burst", env={"TESTPROJECT_JOB_SIGNALS": str(record)})
    assert worker.wait(timeout=60) == 0, worker.output()
    while not is_status(flaky.id, JobStatus.SUCCEEDED)():  # its retry may wait out the backoff
        assert spawn_worker("--burst", env={"TESTPROJECT_JOB_SIGNALS": str(record)}).wait(timeout=60) == 0

    got = lines(record)
    finished = [g for g in got if g["signal"] == "job_finished"]
    started = [g for g in got if g["signal"] == "job_started"]
    assert {(g["job_id"], g["attempt"]) for g in started} == {
        (str(ok.id), "1"),
        (str(flaky.id), "1"),
        (str(flaky.id), "2"),
    }
    by_attempt = {(g["job_id"], g["attempt"]): g for g in finished}
    assert by_attempt[(str(ok.id), "1")]["status"] == "SUCCEEDED"
    assert by_attempt[(str(flaky.id), "1")]["status"] == "PENDING"  # a retry is an end too
    assert by_attempt[(str(flaky.id), "1")]["outcome"] == "FAILED_TRANSIENT"
    assert by_attempt[(str(flaky.id), "2")]["outcome"] == "SUCCEEDED"
    for g in finished:
        assert g["kind"] in ("demo.noop", "test.flaky") and float(g["seconds"]) >= 0
        # Read in the receiver: the finish had committed (the attempt's outcome is written by it alone).
        assert g["committed_outcome"] == g["outcome"], g
    assert str(os.getpid()) not in {g["pid"] for g in finished}  # sent in the worker


# -- OpenTelemetry ----------------------------------------------------------------------------------

_TEST_SPANS: Path | None = None


def test_spans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This process's SDK (the global tracer provider can be set once): every span into one file."""
    global _TEST_SPANS
    if _TEST_SPANS is None:
        _TEST_SPANS = tmp_path_factory.mktemp("otel") / "test-process.jsonl"
        otel.export_to(str(_TEST_SPANS))
    return _TEST_SPANS


test_spans.__test__ = False  # type: ignore[attr-defined]


def test_an_attempts_span_is_a_child_of_the_span_that_enqueued_it_across_processes(
    spawn_worker, tmp_path, tmp_path_factory
):
    ours = test_spans(tmp_path_factory)
    worker_spans = tmp_path / "worker.jsonl"
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("POST /orders") as request_span:
        ok = reliableq.enqueue("demo.noop", {}, queue="traced")
        bad = reliableq.enqueue("test.traced_failure", {}, queue="traced")
        reliableq.enqueue("test.unstorable_result", {}, queue="traced")
    trace_id = f"{request_span.get_span_context().trace_id:032x}"
    worker = spawn_worker("--burst", "--queues", "traced", env={"TESTPROJECT_OTEL_FILE": str(worker_spans)})
    assert worker.wait(timeout=60) == 0, worker.output()

    published = {s["name"]: s for s in lines(ours) if s["trace_id"] == trace_id and s["kind"] == "PRODUCER"}
    processed = {s["name"]: s for s in lines(worker_spans) if s["trace_id"] == trace_id}
    assert set(published) == {"demo.noop publish", "test.traced_failure publish", "test.unstorable_result publish"}
    assert set(processed) == {"demo.noop process", "test.traced_failure process", "test.unstorable_result process"}
    for kind, job in (("demo.noop", ok), ("test.traced_failure", bad)):
        span = processed[f"{kind} process"]
        assert span["kind"] == "CONSUMER"
        assert span["parent_span_id"] == published[f"{kind} publish"]["span_id"]  # across the process boundary
        assert span["attributes"]["messaging.system"] == "reliableq"
        assert span["attributes"]["messaging.destination.name"] == "traced"
        assert span["attributes"]["messaging.message.id"] == str(job.id)
        assert span["attributes"]["reliableq.attempt"] == 1
        assert Job.objects.get(pk=job.id).trace_context["traceparent"].split("-")[1] == trace_id
    assert processed["demo.noop process"]["attributes"]["reliableq.outcome"] == "SUCCEEDED"
    failed = processed["test.traced_failure process"]
    assert failed["status"] == "ERROR" and failed["events"] == ["exception"]
    assert failed["attributes"]["reliableq.outcome"] == "FAILED_TRANSIENT"  # its budget was 1: DEAD now
    # Nothing raised, yet the attempt failed (its return value cannot be stored): ERROR all the same.
    unstorable = processed["test.unstorable_result process"]
    assert unstorable["attributes"]["reliableq.outcome"] == "FAILED_PERMANENT"
    assert unstorable["status"] == "ERROR", unstorable
    assert published["demo.noop publish"]["parent_span_id"] == f"{request_span.get_span_context().span_id:016x}"


def test_a_submission_over_http_carries_the_requests_traceparent(tmp_path_factory):
    test_spans(tmp_path_factory)
    user = accounts.grant(User.objects.create_user("tracer"), "reliableq.submit_job")
    client = APIClient()
    client.force_authenticate(user)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    answer = client.post("/v1/jobs", {"kind": "demo.noop", "payload": {}}, format="json", HTTP_TRACEPARENT=parent)
    assert answer.status_code == 202, answer.content
    stored = Job.objects.get(pk=answer.json()["id"]).trace_context["traceparent"]
    assert stored.split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"  # the same trace
    assert stored.split("-")[2] != "00f067aa0ba902b7"  # its own publish span, a child of the request's


# -- progress ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["test.progress", "test.async_progress", "test.isolated_progress"])
def test_progress_is_visible_while_the_job_runs_and_written_at_most_once_a_second(spawn_worker, kind):
    job = reliableq.enqueue(kind, {"steps": 30, "step_seconds": 0.1})
    viewer = APIClient()
    viewer.force_authenticate(accounts.grant(User.objects.create_user("viewer"), "reliableq.view_job"))
    spawn_worker()
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        document = viewer.get(f"/v1/jobs/{job.id}").json()
        if document["status"] == JobStatus.RUNNING and document["progress"]:
            seen.append(document["progress"])
        if document["status"] == JobStatus.SUCCEEDED:
            break
        time.sleep(0.05)
    assert seen, "no progress was visible while the job ran"
    assert all(p["total"] == 30 and 1 <= p["done"] <= 30 for p in seen)
    assert [p["done"] for p in seen] == sorted(p["done"] for p in seen)
    # 30 reports over about 3 s: written at most once a second (each write stamps its own `at`).
    assert len({p["at"] for p in seen}) <= 5, sorted({p["at"] for p in seen})


def test_the_last_progress_report_is_written_with_the_finish(spawn_worker):
    # Five reports in a burst, then the return: the heartbeat writes at most once a second, so only
    # the finish can carry the last one (issue 50: a SUCCEEDED job showed {done: 4, total: 5}).
    kinds = ["test.progress", "test.async_progress", "test.isolated_progress"]
    jobs = [reliableq.enqueue(kind, {"steps": 5, "step_seconds": 0}) for kind in kinds]
    assert spawn_worker("--burst").wait(timeout=60) == 0
    for kind, job in zip(kinds, jobs, strict=True):
        stored = Job.objects.get(pk=job.id)
        assert stored.status == JobStatus.SUCCEEDED, kind
        assert (stored.progress["done"], stored.progress["total"]) == (5, 5), (kind, stored.progress)


def test_a_stale_attempts_progress_changes_nothing():
    job = reliableq.enqueue("demo.noop", {}, queue="stale-progress")
    [claimed], _ = jobqueue.claim(worker_id="w", queues=["stale-progress"], limit=1, lease_seconds=30)

    assert jobqueue.record_progress([(job.id, uuid.uuid4(), {"done": 1, "total": 2, "note": ""})]) == 0
    assert Job.objects.get(pk=job.id).progress is None
    assert jobqueue.record_progress([(job.id, claimed.lease_token, {"done": 1, "total": 2, "note": ""})]) == 1
    assert Job.objects.get(pk=job.id).progress["done"] == 1


# -- results ----------------------------------------------------------------------------------------


def test_keep_result_stores_the_return_value_for_the_api_and_the_admin(spawn_worker, client):
    job = reliableq.enqueue("test.keeps_result", {"value": {"rows": 42, "ok": True}})
    unstorable = reliableq.enqueue("test.unstorable_result", {})
    assert spawn_worker("--burst").wait(timeout=60) == 0

    stored = Job.objects.get(pk=job.id)
    assert stored.result == {"rows": 42, "ok": True}
    viewer = APIClient()
    viewer.force_authenticate(User.objects.create_superuser("ops", password="a long passphrase"))
    assert viewer.get(f"/v1/jobs/{job.id}").json()["result"] == {"rows": 42, "ok": True}
    client.login(username="ops", password="a long passphrase")
    page = client.get(f"/admin/reliableq/job/{job.id}/change/")
    assert page.status_code == 200 and "&quot;rows&quot;: 42" in page.content.decode()

    [attempt] = Attempt.objects.filter(job_id=unstorable.id)
    assert attempt.outcome == Outcome.FAILED_PERMANENT
    assert "return value cannot be stored (keep_result)" in attempt.error and "set is not JSON" in attempt.error
    assert Job.objects.get(pk=unstorable.id).result is None


# -- structured logs --------------------------------------------------------------------------------


def test_the_workers_log_records_carry_the_job_as_fields(caplog):
    from reliableq.worker.completer import _log

    finish = Finish(job_id=uuid.uuid4(), lease_token=uuid.uuid4(), status="PENDING",
                    outcome="FAILED_TRANSIENT", error="boom", delay=1.0)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="reliableq.worker"):
        _log(finish, 2, "shop.receipt")
    [record] = caplog.records
    assert (record.job_id, record.kind, record.attempt, record.lease_token, record.outcome) == (
        str(finish.job_id),
        "shop.receipt",
        2,
        str(finish.lease_token),
        "FAILED_TRANSIENT",
    )
