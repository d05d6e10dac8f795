"""debounce and debounce_max are for code: over HTTP (a job, a batch item, a workflow member) each is
refused with a 400 that says so, and the submitter's pending job keeps its payload and its start."""

from __future__ import annotations

import pytest

from reliableq.models import Job

from .conftest import problem

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = "reliableq.submit_job"
JOB = {"kind": "demo.noop", "payload": {"n": 1}, "unique_key": "digest"}


def test_a_submitter_cannot_debounce_or_rewrite_a_pending_job_over_http(client_of):
    user = client_of("user", SUBMIT)
    assert user.submit(JOB).status_code == 202
    before = Job.objects.get()

    for extra in ({"debounce": 3600}, {"debounce": 1, "debounce_max": 3600}, {"debounce_max": 5}):
        body = problem(user.submit({**JOB, "payload": {"n": 2}, **extra}), 400)
        for name in extra:
            assert "cannot be set over HTTP" in body["errors"][name][0]
    batch = user.request("POST", "/v1/jobs/batch", json={"jobs": [{**JOB, "unique_key": None, "debounce": 5}]})
    assert "cannot be set over HTTP" in str(problem(batch, 400)["errors"])
    member = {"name": "a", "kind": "demo.noop", "payload": {}, "debounce": 5}
    workflow = user.request("POST", "/v1/workflows", json={"members": [member]})
    assert "cannot be set over HTTP" in str(problem(workflow, 400)["errors"])

    after = Job.objects.get()
    assert (after.payload, after.run_at, after.updated_at) == (before.payload, before.run_at, before.updated_at)
