"""The /v1 routes do what CONTRACT.md says: codes, bodies, Location, attempts, filters, pages."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db.models import F
from django.db.models.functions import Now
from django.urls import URLPattern, URLResolver, get_resolver
from openapi_spec_validator import validate

from reliableq import queue as jobqueue
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import db
from reliableq.queue.stats import snapshot

from .conftest import ALL_PERMS, problem_of
from .jobs import claim_one, finish, fresh_queue, job_in

pytestmark = pytest.mark.django_db

JOB_FIELDS = {
    "id",
    "kind",
    "queue",
    "priority",
    "payload",
    "status",
    "attempt_count",
    "max_attempts",
    "run_at",
    "lease_expires_at",
    "worker_id",
    "last_error",
    "dedupe_key",
    "effect_key",
    "submitted_by",
    "concurrency_key",
    "fair_key",
    "unique_key",
    "snoozes",
    "cancel_requested",
    "progress",
    "waiting_for",
    "waiting_until",
    "result",
    "created_at",
    "updated_at",
    "finished_at",
    "attempts",
}


def parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# -- POST /v1/jobs ---------------------------------------------------------------------------


def test_submit_answers_202_with_location_and_the_committed_job(api):
    soon = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)).replace(microsecond=0)
    body = {
        "kind": "demo.noop",
        "payload": {"user_id": 7, "tags": ["a", "b"]},
        "queue": "mail.high",
        "priority": 5,
        "max_attempts": 2,
        "run_at": soon.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
    }
    response = api.post("/v1/jobs", body, format="json")

    assert response.status_code == 202, response.content
    assert response["Content-Type"] == "application/json"
    job = response.json()
    assert set(job) == JOB_FIELDS
    assert response["Location"] == f"/v1/jobs/{job['id']}"
    assert job["kind"] == "demo.noop" and job["payload"] == body["payload"]
    assert (job["queue"], job["priority"], job["max_attempts"]) == ("mail.high", 5, 2)
    assert parse_time(job["run_at"]) == soon
    assert job["status"] == "PENDING" and job["attempt_count"] == 0 and job["attempts"] == []
    assert job["effect_key"] == f"reliableq:demo.noop:{job['id']}"
    assert job["dedupe_key"] is None

    row = Job.objects.get(pk=job["id"])
    assert (row.kind, row.payload, row.queue, row.priority, row.max_attempts, row.status) == (
        "demo.noop",
        body["payload"],
        "mail.high",
        5,
        2,
        JobStatus.PENDING,
    )


def test_submit_fills_in_the_default_queue_priority_run_at_and_the_kinds_budget(api):
    response = api.post("/v1/jobs", {"kind": "test.always_fails", "payload": {}}, format="json")

    assert response.status_code == 202, response.content
    job = response.json()
    assert (job["queue"], job["priority"]) == ("default", 0)
    assert job["max_attempts"] == 3  # @handler("test.always_fails", max_attempts=3)
    assert Job.objects.filter(pk=job["id"], run_at__lte=Now()).exists(), "run_at defaults to now: due at once"


def test_submit_with_idempotency_key_stores_it_as_the_dedupe_key(api):
    response = api.post(
        "/v1/jobs", {"kind": "demo.noop", "payload": {}}, format="json", HTTP_IDEMPOTENCY_KEY="order-17"
    )

    assert response.status_code == 202
    assert response.json()["dedupe_key"] == "order-17"
    assert Job.objects.get(dedupe_key="order-17").id == uuid.UUID(response.json()["id"])


# -- GET /v1/jobs/<id> -----------------------------------------------------------------------


def test_get_job_lists_every_attempt_after_a_retry_and_a_success(api):
    queue = fresh_queue()
    job_id = api.post(
        "/v1/jobs", {"kind": "test.flaky", "payload": {"failures": 1}, "queue": queue}, format="json"
    ).json()["id"]
    first = claim_one(queue, worker_id="w-a")
    finish(first, JobStatus.PENDING, Outcome.FAILED_TRANSIENT, "attempt 1 failed on purpose")
    second = claim_one(queue, worker_id="w-b")
    finish(second, JobStatus.SUCCEEDED, Outcome.SUCCEEDED)

    response = api.get(f"/v1/jobs/{job_id}")

    assert response.status_code == 200
    job = response.json()
    assert (job["status"], job["attempt_count"], job["last_error"]) == ("SUCCEEDED", 2, "")
    assert job["finished_at"] is not None and job["lease_expires_at"] is None
    assert [(a["number"], a["worker_id"], a["outcome"], a["error"]) for a in job["attempts"]] == [
        (1, "w-a", "FAILED_TRANSIENT", "attempt 1 failed on purpose"),
        (2, "w-b", "SUCCEEDED", ""),
    ]
    assert [a["lease_token"] for a in job["attempts"]] == [str(first.lease_token), str(second.lease_token)]
    assert all(a["started_at"] and a["finished_at"] for a in job["attempts"])


def test_get_running_job_shows_its_open_attempt_and_lease(api):
    job = job_in(JobStatus.RUNNING)

    body = api.get(f"/v1/jobs/{job.id}").json()

    assert body["status"] == "RUNNING" and body["worker_id"] == "w-api-test"
    assert body["lease_expires_at"] is not None
    assert [(a["number"], a["outcome"], a["finished_at"]) for a in body["attempts"]] == [(1, "RUNNING", None)]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_get_job_shows_the_attempt_of_a_real_worker_that_ran_it(api, spawn_worker):
    queue = fresh_queue()
    job_id = api.post("/v1/jobs", {"kind": "demo.noop", "payload": {}, "queue": queue}, format="json").json()["id"]

    worker = spawn_worker("--queues", queue, "--burst")
    assert worker.wait(timeout=60) == 0, worker.output()

    job = api.get(f"/v1/jobs/{job_id}").json()
    assert (job["status"], job["attempt_count"], job["worker_id"]) == ("SUCCEEDED", 1, "w1")
    assert [(a["number"], a["worker_id"], a["outcome"]) for a in job["attempts"]] == [(1, "w1", "SUCCEEDED")]


def test_get_unknown_job_is_404_problem(api):
    body = problem_of(api.get(f"/v1/jobs/{uuid.uuid4()}"), 404)
    assert "No job" in body["detail"]


# -- GET /v1/jobs ----------------------------------------------------------------------------


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [job["id"] for job in response.json()["results"]]


def test_list_filters_by_status_kind_and_queue_alone_and_combined(api):
    made = {
        "pending": job_in(JobStatus.PENDING, queue="alpha"),
        "pending_flaky": job_in(JobStatus.PENDING, kind="test.flaky", queue="beta"),
        "dead": job_in(JobStatus.DEAD),
        "succeeded": job_in(JobStatus.SUCCEEDED, kind="test.flaky"),
        "cancelled": job_in(JobStatus.CANCELLED, queue="alpha"),
        "running": job_in(JobStatus.RUNNING),
    }
    everything = {str(j.id) for j in made.values()}

    def listed(**params: str) -> set[str]:
        return set(ids(api.get("/v1/jobs", params)))

    assert listed() == everything
    assert listed(status="PENDING") == {str(made["pending"].id), str(made["pending_flaky"].id)}
    for status in ("DEAD", "SUCCEEDED", "CANCELLED", "RUNNING"):
        assert listed(status=status) == {str(made[status.lower()].id)}, status
    assert listed(kind="test.flaky") == {str(made["pending_flaky"].id), str(made["succeeded"].id)}
    assert listed(queue="alpha") == {str(made["pending"].id), str(made["cancelled"].id)}
    assert listed(status="PENDING", queue="alpha") == {str(made["pending"].id)}
    assert listed(status="PENDING", kind="test.flaky", queue="beta") == {str(made["pending_flaky"].id)}
    assert listed(kind="no.such.kind") == set()
    assert listed(status="CANCELLED", queue="beta") == set()


def walk(api, **params: str) -> tuple[list[str], int]:
    """Follow `next` from the first page to the end; return the ids in order and the page count."""
    seen: list[str] = []
    response = api.get("/v1/jobs", params)
    pages = 1
    while True:
        seen += ids(response)
        following = response.json()["next"]
        if following is None:
            return seen, pages
        assert following.startswith("http://testserver/v1/jobs?")
        response = api.get(following)
        pages += 1
        assert pages < 100, "pagination does not end"


def test_list_pages_walk_every_job_exactly_once_newest_first(api):
    jobs = [job_in(JobStatus.PENDING) for _ in range(11)]
    # One test is one transaction, where now() stands still: give each job its own creation time.
    base = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    for minutes, job in enumerate(jobs):
        Job.objects.filter(pk=job.id).update(created_at=base + dt.timedelta(minutes=minutes))

    seen, pages = walk(api, page_size="3")

    assert seen == [str(j.id) for j in reversed(jobs)], "every job once, newest first"
    assert pages == 4


def test_list_pages_walk_jobs_created_in_one_transaction_exactly_once(api):
    """Jobs enqueued together share created_at (now() is the transaction's start): the id breaks ties."""
    jobs = [job_in(JobStatus.PENDING) for _ in range(10)]
    assert len({j.created_at for j in Job.objects.filter(pk__in=[j.id for j in jobs])}) == 1

    seen, _ = walk(api, page_size="4")

    assert sorted(seen) == sorted(str(j.id) for j in jobs) and len(seen) == 10
    assert seen == sorted(seen, reverse=True), "ties are ordered by id, descending"


def test_list_pages_keep_their_filter_across_pages(api):
    wanted = [job_in(JobStatus.DEAD) for _ in range(5)]
    for _ in range(4):
        job_in(JobStatus.PENDING)

    seen, pages = walk(api, status="DEAD", page_size="2")

    assert sorted(seen) == sorted(str(j.id) for j in wanted) and pages == 3


def test_list_previous_link_walks_back_to_the_first_page(api):
    jobs = [job_in(JobStatus.PENDING) for _ in range(6)]
    base = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    for minutes, job in enumerate(jobs):
        Job.objects.filter(pk=job.id).update(created_at=base + dt.timedelta(minutes=minutes))
    first = api.get("/v1/jobs", {"page_size": "2"})
    assert first.json()["previous"] is None
    second = api.get(first.json()["next"])

    back = api.get(second.json()["previous"])

    assert ids(back) == ids(first)


# -- POST /v1/jobs/<id>/replay ---------------------------------------------------------------


def test_replay_sends_a_dead_job_back_to_pending_with_same_id_effect_key_and_history(api):
    job = job_in(JobStatus.DEAD, kind="test.flaky", max_attempts=1)
    before = api.get(f"/v1/jobs/{job.id}").json()

    response = api.post(f"/v1/jobs/{job.id}/replay")

    assert response.status_code == 202, response.content
    after = response.json()
    assert after["id"] == str(job.id) and after["status"] == "PENDING"
    assert after["effect_key"] == before["effect_key"] == f"reliableq:test.flaky:{job.id}"
    assert after["attempts"] == before["attempts"] and len(after["attempts"]) == 1
    assert after["attempts"][0]["outcome"] == "FAILED_PERMANENT"
    assert after["finished_at"] is None
    assert after["max_attempts"] > after["attempt_count"] == 1, "a fresh budget after replay"
    # It is claimable again, and its next attempt is number 2 with the same effect key.
    claimed = claim_one(job.queue)
    assert (claimed.id, claimed.attempt, claimed.idempotency_key) == (job.id, 2, before["effect_key"])


def test_replay_of_unknown_job_is_404_problem(api):
    problem_of(api.post(f"/v1/jobs/{uuid.uuid4()}/replay"), 404)


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.CANCELLED])
def test_replay_of_a_job_that_is_not_dead_is_409_and_changes_nothing(api, status):
    job = job_in(status)
    before = Job.objects.values().get(pk=job.id)

    body = problem_of(api.post(f"/v1/jobs/{job.id}/replay"), 409)

    assert status in body["detail"] and "DEAD" in body["detail"]
    assert Job.objects.values().get(pk=job.id) == before


# -- POST /v1/jobs/<id>/cancel ---------------------------------------------------------------


def test_cancel_withdraws_a_pending_job_so_no_worker_claims_it(api):
    job = job_in(JobStatus.PENDING)

    response = api.post(f"/v1/jobs/{job.id}/cancel")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == str(job.id) and body["status"] == "CANCELLED" and body["finished_at"] is not None
    claimed, _ = jobqueue.claim(worker_id="w", queues=[job.queue], limit=10, lease_seconds=30)
    assert claimed == []
    assert not Attempt.objects.filter(job_id=job.id).exists()


def test_cancel_of_unknown_job_is_404_problem(api):
    problem_of(api.post(f"/v1/jobs/{uuid.uuid4()}/cancel"), 404)


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED])
def test_cancel_of_a_finished_job_is_409_and_changes_nothing(api, status):
    job = job_in(status)
    before = Job.objects.values().get(pk=job.id)

    body = problem_of(api.post(f"/v1/jobs/{job.id}/cancel"), 409)

    assert status in body["detail"] and "PENDING or RUNNING" in body["detail"]
    assert Job.objects.values().get(pk=job.id) == before


def test_cancel_of_a_running_job_is_202_with_cancel_requested(api):
    job = job_in(JobStatus.RUNNING)

    response = api.post(f"/v1/jobs/{job.id}/cancel")

    assert response.status_code == 202, response.content
    assert response.json()["status"] == "RUNNING" and response.json()["cancel_requested"] is True
    assert Job.objects.get(pk=job.id).cancel_requested_at is not None


# -- GET /v1/stats ---------------------------------------------------------------------------


def test_stats_of_an_empty_queue_are_zero(api):
    response = api.get("/v1/stats")

    assert response.status_code == 200
    assert response.json() == {
        "by_status": {s: 0 for s in JobStatus.values},
        "by_kind": {},
        "oldest_due_pending_age_seconds": 0,
        "dead": 0,
        "paused": 0,
        "throttled": 0,
    }


def test_stats_count_by_status_and_kind_with_the_oldest_due_pending_age_and_dead_count(api):
    late = job_in(JobStatus.PENDING)
    with db.cursor() as cursor:  # now(), the clock stats reads (Django's Now() is statement time)
        cursor.execute("UPDATE reliableq_job SET run_at = now() - interval '120 seconds' WHERE id = %s", [late.id])
    job_in(JobStatus.PENDING, kind="test.flaky")  # due now: age 0
    job_in(JobStatus.PENDING, run_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=300))  # not due: no age
    old_but_running = job_in(JobStatus.RUNNING)
    Job.objects.filter(pk=old_but_running.id).update(run_at=F("run_at") - dt.timedelta(hours=5))
    job_in(JobStatus.DEAD)
    job_in(JobStatus.DEAD, kind="test.flaky")
    job_in(JobStatus.SUCCEEDED)
    job_in(JobStatus.CANCELLED, kind="test.flaky")

    stats = api.get("/v1/stats").json()

    assert stats["by_status"] == {"WAITING": 0, "PENDING": 3, "RUNNING": 1, "SUCCEEDED": 1, "DEAD": 2, "CANCELLED": 1}
    assert stats["by_kind"] == {
        "demo.noop": {"PENDING": 2, "RUNNING": 1, "DEAD": 1, "SUCCEEDED": 1},
        "test.flaky": {"PENDING": 1, "DEAD": 1, "CANCELLED": 1},
    }
    assert stats["dead"] == 2
    assert 120 <= stats["oldest_due_pending_age_seconds"] < 180, stats
    assert stats == snapshot()


# -- GET /v1/schema --------------------------------------------------------------------------


def routes_served() -> dict[str, set[str]]:
    """Every /v1 URL pattern the project serves, as an OpenAPI path, with its view's methods."""
    found: dict[str, set[str]] = {}

    def visit(patterns, prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                visit(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                if route.startswith("v1/"):
                    path = "/" + route.replace("<str:job_id>", "{id}").replace("<str:charge_id>", "{id}")
                    path = path.replace("<str:workflow_id>", "{id}")
                    path = path.replace("<str:name>", "{name}")
                    view = p.callback.cls
                    found[path] = {m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)}

    visit(get_resolver().url_patterns, "")
    return found


def test_schema_is_a_valid_openapi_3_document_served_without_login(anon):
    response = anon.get("/v1/schema")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    document = response.json()
    assert document["openapi"].startswith("3.")
    validate(document)  # openapi-spec-validator: raises on any violation of the OpenAPI 3 spec


def test_schema_documents_every_route_and_method_served_including_charges(anon):
    document = anon.get("/v1/schema").json()
    documented = {path: set(ops) for path, ops in document["paths"].items()}

    assert documented == routes_served()
    assert {
        "/v1/jobs",
        "/v1/jobs/batch",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/replay",
        "/v1/jobs/{id}/cancel",
        "/v1/workflows",
        "/v1/workflows/{id}",
        "/v1/workflows/{id}/cancel",
        "/v1/stats",
        "/v1/queues",
        "/v1/queues/{name}/pause",
        "/v1/queues/{name}/resume",
        "/v1/schedules",
        "/v1/events/{name}",
        "/v1/charges",
        "/v1/charges/{id}",
        "/v1/schema",
        "/v1/ready",
        "/v1/metrics",
    } == set(documented)


def test_schema_documents_the_contract_status_codes_of_each_operation(anon):
    paths = anon.get("/v1/schema").json()["paths"]

    def codes(path: str, method: str) -> set[str]:
        return set(paths[path][method]["responses"])

    assert {"202", "200", "400", "401", "403", "409", "413", "415", "429", "503"} <= codes("/v1/jobs", "post")
    assert {"202", "400", "401", "403", "413", "415", "429", "503"} <= codes("/v1/jobs/batch", "post")
    assert {"200", "400", "401", "403"} <= codes("/v1/jobs", "get")
    assert {"200", "401", "403", "404"} <= codes("/v1/jobs/{id}", "get")
    assert {"202", "401", "403", "404", "409"} <= codes("/v1/jobs/{id}/replay", "post")
    assert {"200", "202", "401", "403", "404", "409"} <= codes("/v1/jobs/{id}/cancel", "post")
    assert {"202", "200", "400", "401", "403", "409", "413", "415", "429", "503"} <= codes("/v1/workflows", "post")
    assert {"200", "401", "403", "404"} <= codes("/v1/workflows/{id}", "get")
    assert {"200", "401", "403", "404", "409"} <= codes("/v1/workflows/{id}/cancel", "post")
    assert {"200", "401", "403"} <= codes("/v1/stats", "get")
    assert {"200", "400", "401", "403"} <= codes("/v1/queues", "get")
    assert {"200", "400", "401", "403"} <= codes("/v1/queues/{name}/pause", "post")
    assert {"200", "400", "401", "403"} <= codes("/v1/queues/{name}/resume", "post")
    assert {"200", "400", "401", "403"} <= codes("/v1/schedules", "get")
    assert {"202", "200", "400", "401", "403", "413", "415", "429"} <= codes("/v1/events/{name}", "post")
    assert {"201", "200", "400", "401", "403", "409", "413", "415"} <= codes("/v1/charges", "post")
    assert {"200", "401", "404"} <= codes("/v1/charges/{id}", "get")
    for path, operations in paths.items():
        for method, operation in operations.items():
            for code, answer in operation["responses"].items():
                if code.startswith(("4", "5")):
                    assert list(answer["content"]) == ["application/problem+json"], (path, method, code)


# -- unknown query parameters, on every route ---------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/v1/jobs"),
        ("post", "/v1/jobs/batch"),
        ("get", "/v1/jobs/00000000-0000-0000-0000-000000000000"),
        ("post", "/v1/jobs/00000000-0000-0000-0000-000000000000/replay"),
        ("post", "/v1/jobs/00000000-0000-0000-0000-000000000000/cancel"),
        ("get", "/v1/stats"),
        ("get", "/v1/metrics"),
        ("get", "/v1/queues"),
        ("get", "/v1/charges/1"),
    ],
)
def test_an_unknown_query_parameter_is_400_on_every_route(make_client, method, path):
    client = make_client(*ALL_PERMS)
    response = getattr(client, method)(f"{path}?verbose=1", {}, format="json")
    body = problem_of(response, 400)
    assert "verbose" in str(body)
