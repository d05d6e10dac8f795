"""POST /v1/jobs/batch: up to 1,000 jobs in one transaction, all or nothing, errors by index."""

from __future__ import annotations

import datetime as dt

import pytest

from reliableq.models import Job, JobStatus

from .conftest import SUBMIT, VIEW, problem_of
from .test_durable_acceptance import fail_at_commit  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db

URL = "/v1/jobs/batch"


def batch(*jobs: dict) -> dict:
    return {"jobs": list(jobs)}


def test_a_batch_is_accepted_in_order_and_every_job_is_committed(api):
    items = [{"kind": "demo.noop", "payload": {"n": n}, "queue": f"q{n % 3}", "priority": n % 5} for n in range(50)]
    items[7] = {"kind": "test.flaky", "payload": {"failures": 0}, "max_attempts": 2}

    response = api.post(URL, batch(*items), format="json")

    assert response.status_code == 202, response.content
    jobs = response.json()["jobs"]
    assert [(j["kind"], j["payload"]) for j in jobs] == [(i["kind"], i["payload"]) for i in items]
    assert all(j["status"] == "PENDING" and j["attempts"] == [] and j["submitted_by"] == "operator" for j in jobs)
    stored = {str(j.id): j for j in Job.objects.all()}
    assert set(stored) == {j["id"] for j in jobs}
    assert stored[jobs[7]["id"]].max_attempts == 2 and stored[jobs[8]["id"]].queue == "q2"
    assert stored[jobs[9]["id"]].priority == 4


def test_invalid_items_are_400_naming_each_by_index_and_nothing_is_stored(api):
    items = [
        {"kind": "demo.noop", "payload": {}},
        {"kind": "demo.noop", "payload": [1]},
        {"kind": "demo.noop", "payload": {}, "queue": "a b"},
        {"kind": "test.poison", "payload": {}},  # not submittable over HTTP
        {"kind": "demo.noop", "payload": {}, "colour": "blue"},
    ]
    body = problem_of(api.post(URL, batch(*items), format="json"), 400)
    assert set(body["errors"]) == {"jobs[1].payload", "jobs[2].queue", "jobs[3].kind", "jobs[4].colour"}
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [{}, {"jobs": []}, {"jobs": "x"}, {"jobs": [{"kind": "demo.noop", "payload": {}}], "extra": 1}, [1, 2]],
    ids=["empty", "no-jobs", "not-a-list", "extra-field", "a-list"],
)
def test_a_malformed_batch_is_400(api, body):
    problem_of(api.post(URL, body, format="json"), 400)
    assert Job.objects.count() == 0


def test_more_than_1000_jobs_is_400_and_1000_is_accepted(api):
    item = {"kind": "demo.noop", "payload": {}}
    body = problem_of(api.post(URL, {"jobs": [item] * 1001}, format="json"), 400)
    assert "At most 1000 jobs" in body["detail"]
    assert Job.objects.count() == 0
    assert api.post(URL, {"jobs": [item] * 1000}, format="json").status_code == 202
    assert Job.objects.count() == 1000


def test_an_oversized_payload_is_413_naming_its_index(api, settings):
    settings.RELIABLEQ = {**settings.RELIABLEQ, "MAX_PAYLOAD_BYTES": 100}
    items = [{"kind": "demo.noop", "payload": {}}, {"kind": "demo.noop", "payload": {"blob": "x" * 200}}]
    body = problem_of(api.post(URL, batch(*items), format="json"), 413)
    assert body["detail"].startswith("job 1:")
    assert Job.objects.count() == 0


def test_submitting_a_batch_needs_submit_job(make_client):
    body = problem_of(make_client(VIEW).post(URL, batch({"kind": "demo.noop", "payload": {}}), format="json"), 403)
    assert "reliableq.submit_job" in body["detail"]
    assert make_client(SUBMIT).post(URL, batch({"kind": "demo.noop", "payload": {}}), format="json").status_code == 202


@pytest.mark.django_db(transaction=True)
def test_a_batch_whose_commit_fails_is_503_and_leaves_no_job_of_it(api, fail_at_commit):  # noqa: F811
    items = [{"kind": "demo.noop", "payload": {"n": n}} for n in range(20)]
    items[13]["payload"] = {"fail_at_commit": True}
    body = problem_of(api.post(URL, batch(*items), format="json"), 503)
    assert "none was accepted" in body["detail"]
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_batch_wakes_each_queue_with_a_due_job_once_after_the_commit(api):
    from tests.integration.helpers import raw_connect

    with raw_connect(autocommit=True) as listener:
        listener.execute("LISTEN reliableq")
        items = [{"kind": "demo.noop", "payload": {}, "queue": q} for q in ("a", "b", "a", "b", "a")]
        soon = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)).isoformat()
        items.append({"kind": "demo.noop", "payload": {}, "queue": "later", "run_at": soon})  # not due: no wake-up
        assert api.post(URL, batch(*items), format="json").status_code == 202
        notes = sorted(n.payload for n in listener.notifies(timeout=1.0))
    assert notes == ["a", "b"]
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 6
