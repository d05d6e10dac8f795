"""POST /v1/jobs renders its answer itself for plain JSON clients (bench.httpcost: DRF's template
response cost 3% of a submission): the same document, headers and status as DRF's Response, and
a client asking for another JSON form (an indent) still gets it through DRF."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db
JOB = {"kind": "demo.noop", "payload": {"n": 1}}


@pytest.mark.parametrize("accept", ["*/*", "application/json"])
def test_a_plain_json_answer_is_compact_json_with_the_routes_headers(make_client, accept):
    response = make_client("submit_job").post("/v1/jobs", JOB, format="json", HTTP_ACCEPT=accept)
    assert response.status_code == 202
    assert response["Content-Type"] == "application/json"
    assert response["Location"] == f"/v1/jobs/{response.json()['id']}"
    assert response["Allow"] == "GET, POST, HEAD, OPTIONS" and response["X-Frame-Options"] == "DENY"
    assert b"\n" not in response.content and b'": ' not in response.content  # DRF's compact form
    assert json.loads(response.content)["status"] == "PENDING"


def test_a_client_asking_for_an_indent_gets_it(make_client):
    client = make_client("submit_job")
    response = client.post("/v1/jobs", JOB, format="json", HTTP_ACCEPT="application/json; indent=2")
    assert response.status_code == 202
    assert response.content.startswith(b'{\n  "id"'), response.content[:40]
    assert response["Content-Type"] == "application/json"


def test_the_same_key_answers_200_in_the_same_form(make_client):
    client = make_client("submit_job")
    first = client.post("/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = client.post("/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"] and again["Content-Type"] == "application/json"
