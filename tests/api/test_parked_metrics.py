"""/v1/metrics counts the parked jobs: WAITING for an event, and PENDING in a sleep not over yet."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import reliableq
from reliableq import services
from reliableq.models import JobStatus, Step
from reliableq.queue import db, parked
from reliableq.testing import run_due

pytestmark = pytest.mark.django_db


def parked_job(kind: str, tmp_path: Path, **payload: object) -> str:
    job_id = reliableq.enqueue(kind, {"log": str(tmp_path / "log"), **payload}).id
    [ran] = run_due()
    assert ran.status in (JobStatus.WAITING, JobStatus.PENDING)
    return str(job_id)


def samples(api) -> dict[str, float]:
    text = api.get("/v1/metrics").content.decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def test_metrics_count_jobs_waiting_for_an_event_and_jobs_in_a_sleep_not_over(api, tmp_path: Path) -> None:
    parked_job("steps.waiter", tmp_path, event="order-1-paid")
    parked_job("steps.waiter", tmp_path, event="order-2-paid", timeout=60)
    asleep = parked_job("steps.sleeper", tmp_path, sleep=600)
    parked_job("steps.sleeper", tmp_path, sleep=600)
    woke = parked_job("steps.sleeper", tmp_path, sleep=600)
    Step.objects.filter(job_id=woke, kind="SLEEP").update(value={"until": 0})  # its sleep is over: due
    reliableq.enqueue("demo.noop", {}, run_at=None)  # PENDING, never slept
    services.cancel(asleep)  # cancelled in its sleep: parked no more

    figures = samples(api)

    assert (figures["reliableq_waiting_jobs"], figures["reliableq_sleeping_jobs"]) == (2, 1)
    reliableq.emit("order-1-paid")
    assert parked.parked() == (1, 1)


def test_the_counts_read_only_parked_rows_through_their_partial_indexes() -> None:
    with db.atomic(), db.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + parked._PARKED_SQL)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # Either partial index of the jobs WAITING for an event (by name, by timeout) holds just those.
    assert "reliableq_job_waiting_for" in plan or "reliableq_job_wait_until" in plan, plan
    assert "reliableq_step_sleep_until" in plan and "reliableq_job_due" not in plan, plan
