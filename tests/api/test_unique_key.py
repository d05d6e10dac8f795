"""POST /v1/jobs with unique_key: at most one PENDING or RUNNING job per kind and key, per submitter.
concurrency_key is not accepted over HTTP, and a batch refuses unique_key."""

from __future__ import annotations

import pytest

from reliableq.models import Job, JobStatus
from reliableq.services import BATCH_UNIQUE_KEY

from .conftest import SUBMIT, VIEW, problem_of

pytestmark = pytest.mark.django_db

JOB = {"kind": "demo.noop", "payload": {"n": 1}, "unique_key": "nightly-report"}


def test_a_second_submission_with_an_active_unique_key_answers_200_with_the_first_job(api):
    first = api.post("/v1/jobs", JOB, format="json")
    again = api.post("/v1/jobs", {**JOB, "payload": {"n": 2}}, format="json")

    assert first.status_code == 202, first.content
    assert first.json()["unique_key"] == "nightly-report"
    assert again.status_code == 200, again.content
    assert again.json()["id"] == first.json()["id"] and again["Location"] == first["Location"]
    assert again.json()["payload"] == {"n": 1}
    assert Job.objects.count() == 1


def test_once_the_job_has_finished_the_unique_key_makes_a_new_one(api):
    first = api.post("/v1/jobs", JOB, format="json").json()
    Job.objects.filter(pk=first["id"]).update(status=JobStatus.CANCELLED)

    again = api.post("/v1/jobs", JOB, format="json")

    assert again.status_code == 202 and again.json()["id"] != first["id"]


def test_another_users_unique_key_neither_blocks_nor_reveals_their_job(api, make_client):
    mine = api.post("/v1/jobs", JOB, format="json").json()

    theirs = make_client(SUBMIT, VIEW).post("/v1/jobs", JOB, format="json")

    assert theirs.status_code == 202 and theirs.json()["id"] != mine["id"]


def test_a_unique_key_with_an_idempotency_key_is_400_and_makes_nothing(api):
    """A job returned through its unique_key cannot bind the key to this body, so the pair is refused."""
    body = problem_of(api.post("/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k1"), 400)
    assert "cannot be combined with an Idempotency-Key" in body["errors"]["unique_key"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("bad", ["", "x" * 256, 7, "nul\x00"])
def test_a_bad_unique_key_is_400(api, bad):
    problem = problem_of(api.post("/v1/jobs", {**JOB, "unique_key": bad}, format="json"), 400)
    assert "unique_key" in problem["errors"]


def test_concurrency_key_is_refused_over_http_with_the_reason(api):
    problem = problem_of(api.post("/v1/jobs", {**JOB, "concurrency_key": "acct-1"}, format="json"), 400)
    assert "shared by every submitter" in problem["errors"]["concurrency_key"][0]
    assert not Job.objects.exists()


def test_a_batch_refuses_unique_key_per_item_and_stores_nothing(api):
    items = [{"kind": "demo.noop", "payload": {}}, JOB, {"kind": "demo.noop", "payload": {}, "unique_key": "b"}]

    problem = problem_of(api.post("/v1/jobs/batch", {"jobs": items}, format="json"), 400)

    assert problem["errors"] == {"jobs[1].unique_key": [BATCH_UNIQUE_KEY], "jobs[2].unique_key": [BATCH_UNIQUE_KEY]}
    assert not Job.objects.exists()


def test_a_stranger_without_submit_job_cannot_use_unique_key(make_client):
    problem_of(make_client(VIEW).post("/v1/jobs", JOB, format="json"), 403)
    assert not Job.objects.exists()
