"""GET /v1/jobs/<id> shows what a job recorded (`steps`) and what it waits for (`waiting_for`, until when)."""

from __future__ import annotations

from pathlib import Path

import pytest

import reliableq
from reliableq.models import Job, JobStatus, StepKind
from reliableq.testing import run_due

pytestmark = pytest.mark.django_db


def test_a_job_lists_its_recorded_steps_with_their_values_for_an_operator(make_client, tmp_path: Path):
    job_id = reliableq.enqueue("steps.three", {"log": str(tmp_path / "log"), "fail_at": "two"}).id
    run_due()

    answer = make_client("view_job").get(f"/v1/jobs/{job_id}")

    assert answer.status_code == 200
    [one] = answer.json()["steps"]
    assert one["name"] == "one" and one["kind"] == StepKind.STEP and one["attempt"] == 1
    assert one["value"] == "one" and one["at"].endswith("Z")
    assert answer.json()["step_count"] == 1 and answer.json()["waiting_for"] is None


def test_a_reader_without_view_job_sees_the_steps_but_not_their_values(make_client, tmp_path: Path):
    job_id = reliableq.enqueue("steps.three", {"log": str(tmp_path / "log"), "fail_at": "two"}).id
    run_due()  # back to PENDING after its first step, for a retry

    answer = make_client("cancel_job").post(f"/v1/jobs/{job_id}/cancel")

    assert answer.status_code == 200 and answer.json()["status"] == JobStatus.CANCELLED
    assert answer.json()["steps"] == [
        {"name": "one", "kind": "STEP", "attempt": 1, "at": answer.json()["steps"][0]["at"]}
    ], "no value: it is the handler's data"


@pytest.mark.parametrize(("timeout", "until"), [(None, False), (3600, True)])
def test_a_waiting_job_says_what_it_waits_for_and_until_when(make_client, tmp_path: Path, timeout, until):
    payload = {"log": str(tmp_path / "log"), "event": "invoice-9-signed", "timeout": timeout}
    job_id = reliableq.enqueue("steps.waiter", {k: v for k, v in payload.items() if v is not None}).id
    run_due()

    answer = make_client("view_job").get(f"/v1/jobs/{job_id}").json()

    assert answer["status"] == JobStatus.WAITING and answer["waiting_for"] == "invoice-9-signed"
    assert (answer["waiting_until"] is not None) is until
    if until:
        assert answer["waiting_until"] == answer["run_at"] == Job.objects.get(pk=job_id).run_at.isoformat()[:-6] + "Z"
    assert [(s["name"], s["kind"]) for s in answer["steps"]] == [("before", "STEP"), ("invoice-9-signed", "EVENT")]
