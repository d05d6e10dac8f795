"""Idempotency-Key on POST /v1/jobs: one job per key, 200 for the same body, 409 for another."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections
from rest_framework.test import APIClient

from reliableq.models import Job, JobStatus, Outcome

from .conftest import problem_of
from .jobs import claim_one, finish, fresh_queue

# A run_at within MAX_SCHEDULE_SECONDS (a year), whole seconds so that it compares exactly.
SOON = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)).replace(microsecond=0)
BODY = {
    "kind": "demo.noop",
    "payload": {"order": 17, "lines": [1, 2]},
    "queue": "orders",
    "priority": 2,
    "max_attempts": 4,
    "run_at": SOON.isoformat(),
}


def submit(client: APIClient, body: dict[str, Any], key: str = "order-17") -> Any:
    return client.post("/v1/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.django_db
def test_same_key_and_same_body_again_answers_200_with_the_same_job(api):
    first = submit(api, BODY)
    again = submit(api, BODY)

    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again["Location"] == first["Location"] == f"/v1/jobs/{first.json()['id']}"
    assert Job.objects.filter(dedupe_key="order-17").count() == Job.objects.count() == 1


@pytest.mark.django_db
def test_same_key_and_same_body_with_keys_in_another_order_is_the_same_submission(api):
    first = submit(api, BODY)
    reordered = dict(reversed(list(BODY.items())))
    reordered["payload"] = {"lines": [1, 2], "order": 17}
    again = api.generic(
        "POST", "/v1/jobs", json.dumps(reordered), content_type="application/json", HTTP_IDEMPOTENCY_KEY="order-17"
    )

    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


@pytest.mark.django_db
def test_without_a_key_every_submission_is_a_new_job(api):
    answers = [api.post("/v1/jobs", BODY, format="json") for _ in range(3)]

    assert [a.status_code for a in answers] == [202, 202, 202]
    assert len({a.json()["id"] for a in answers}) == 3


@pytest.mark.django_db
def test_same_key_and_same_body_after_the_job_finished_still_answers_200(api):
    body = {**BODY, "queue": fresh_queue()}
    del body["run_at"]
    job_id = submit(api, body).json()["id"]
    finish(claim_one(body["queue"]), JobStatus.SUCCEEDED, Outcome.SUCCEEDED)

    again = submit(api, body)

    assert again.status_code == 200 and again.json()["id"] == job_id and again.json()["status"] == "SUCCEEDED"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        {"kind": "test.flaky"},
        {"payload": {"order": 18, "lines": [1, 2]}},
        {"payload": {"order": 17, "lines": [2, 1]}},
        {"queue": "other"},
        {"priority": 3},
        {"max_attempts": 5},
        {"run_at": (SOON + dt.timedelta(seconds=1)).isoformat()},
    ],
    ids=lambda change: next(iter(change)),
)
def test_same_key_with_another_body_is_409_problem_and_keeps_the_original(api, change):
    original = submit(api, BODY).json()

    body = problem_of(submit(api, {**BODY, **change}), 409)

    assert "order-17" in body["detail"] and original["id"] in body["detail"]
    assert list(Job.objects.values_list("id", flat=True)) == [uuid.UUID(original["id"])]
    assert Job.objects.get().payload == BODY["payload"]


# A repeated submission is compared with what the job was made from, not with its *current*
# run_at and max_attempts, which the queue itself rewrites (a retry moves run_at, a replay raises
# max_attempts): an identical retry of the submission is not taken for another body.


@pytest.mark.django_db
def test_same_body_with_run_at_again_after_a_transient_retry_still_answers_200(api):
    body = {**BODY, "queue": fresh_queue(), "run_at": "2001-01-01T00:00:00Z"}  # due at once
    job_id = submit(api, body).json()["id"]
    finish(claim_one(body["queue"]), JobStatus.PENDING, Outcome.FAILED_TRANSIENT, "provider said 503")

    again = submit(api, body)

    assert again.status_code == 200, again.content
    assert again.json()["id"] == job_id


@pytest.mark.django_db
def test_same_body_with_max_attempts_again_after_a_replay_still_answers_200(api):
    body = {**BODY, "queue": fresh_queue(), "max_attempts": 1}
    del body["run_at"]
    job_id = submit(api, body).json()["id"]
    finish(claim_one(body["queue"]), JobStatus.DEAD, Outcome.FAILED_PERMANENT, "bad input")
    assert api.post(f"/v1/jobs/{job_id}/replay").status_code == 202

    again = submit(api, body)

    assert again.status_code == 200, again.content
    assert again.json()["id"] == job_id


# -- concurrency: real connections, real commits ---------------------------------------------


def race(n: int, attempt: Callable[[int], tuple[int, str]]) -> list[tuple[int, str]]:
    """Run attempt(i) in n threads released together; each thread closes its own DB connection."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = attempt(i)
        except BaseException as exc:  # reported below, with the others
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a submitting thread hung"
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return results


def assert_one_job_for_the_key(results: list[tuple[int, str]], key: str) -> None:
    codes = sorted(code for code, _ in results)
    assert set(codes) <= {200, 202} and codes.count(202) == 1, codes
    assert len({job_id for _, job_id in results}) == 1, results
    assert Job.objects.filter(dedupe_key=key).count() == 1
    assert str(Job.objects.get(dedupe_key=key).id) == results[0][1]


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_submissions_in_threads_make_one_job(operator):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=operator).key

    def attempt(i: int) -> tuple[int, str]:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        response = submit(client, BODY, key="race-threads")
        return response.status_code, response.json()["id"]

    for _ in range(3):  # three rounds: the race is won by a different thread each time
        Job.objects.filter(dedupe_key="race-threads").delete()
        assert_one_job_for_the_key(race(12, attempt), "race-threads")


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_submissions_to_a_live_server_make_one_job(live_api):
    """16 clients at once against gunicorn (2 processes x 8 threads), each on its own connection."""
    host, port = live_api.url.removeprefix("http://").split(":")
    payload = json.dumps(BODY).encode()

    def attempt(i: int) -> tuple[int, str]:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request(
                "POST",
                "/v1/jobs",
                body=payload,
                headers={**live_api.headers, "Content-Type": "application/json", "Idempotency-Key": "race-live"},
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read())["id"]
        finally:
            conn.close()

    assert_one_job_for_the_key(race(16, attempt), "race-live")
