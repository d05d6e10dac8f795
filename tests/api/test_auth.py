"""Who may do what: 401 for anonymous callers, 403 without the permission, token and session both work."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.middleware.csrf import _get_new_csrf_string
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from reliableq.models import Job, JobStatus

from .conftest import ADD_CHARGE, CANCEL, REPLAY, SUBMIT, VIEW, VIEW_CHARGE, make_user, problem_of, token_client
from .jobs import job_in

pytestmark = pytest.mark.django_db

SOME_ID = "3f2c2d43-5d0e-4c4b-9a4e-1d8b6c2b9f00"
ROUTES = [
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs"),
    ("get", f"/v1/jobs/{SOME_ID}"),
    ("post", f"/v1/jobs/{SOME_ID}/replay"),
    ("post", f"/v1/jobs/{SOME_ID}/cancel"),
    ("get", "/v1/stats"),
    ("post", "/v1/charges"),
    ("get", f"/v1/charges/{SOME_ID}"),
]
JOB = {"kind": "demo.noop", "payload": {}}


def call(client: APIClient, method: str, path: str):
    if method == "post":
        return client.post(path, JOB, format="json", HTTP_IDEMPOTENCY_KEY="k")
    return client.get(path)


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_anonymous_caller_gets_401_problem_with_www_authenticate_on_every_route(anon, method, path):
    response = call(anon, method, path)

    problem_of(response, 401)
    assert response["WWW-Authenticate"] == "Token"
    assert Job.objects.count() == 0


@pytest.mark.parametrize("header", ["Token nope", "Token ", "Bearer abc", "Token a b", "Token caf\xe9"])
def test_bad_or_unknown_token_is_401(header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    problem_of(client.get("/v1/jobs"), 401)


def test_token_of_an_inactive_user_is_401():
    user = make_user("gone", VIEW)
    client = token_client(user)
    user.is_active = False
    user.save()
    problem_of(client.get("/v1/jobs"), 401)


def test_schema_needs_no_login(anon):
    assert anon.get("/v1/schema").status_code == 200


def test_token_auth_works_on_reads_and_writes(api):
    assert api.get("/v1/jobs").status_code == 200
    assert api.post("/v1/jobs", JOB, format="json").status_code == 202


def test_session_auth_works_for_reads_and_for_writes_with_a_csrf_token():
    user = make_user("browser", VIEW, SUBMIT)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token

    assert client.get("/v1/jobs").status_code == 200
    response = client.post("/v1/jobs", JOB, format="json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 202, response.content


def test_session_write_without_csrf_token_is_403_problem():
    """A logged-in browser session is not enough to write: the CSRF check still applies."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(make_user("browser", VIEW, SUBMIT))

    body = problem_of(client.post("/v1/jobs", JOB, format="json"), 403)
    assert "CSRF" in body["detail"]
    assert Job.objects.count() == 0


@override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])
def test_session_from_a_password_login_works():
    make_user("person", VIEW, password="s3cret-pass")
    client = APIClient()
    assert client.login(username="person", password="s3cret-pass")
    assert client.get("/v1/stats").status_code == 200


def test_authenticated_user_without_submit_job_may_not_submit_jobs(make_client):
    body = problem_of(make_client(VIEW, REPLAY, CANCEL).post("/v1/jobs", JOB, format="json"), 403)
    assert "reliableq.submit_job" in body["detail"]
    assert Job.objects.count() == 0


def test_submit_job_alone_is_enough_to_submit(make_client):
    response = make_client(SUBMIT).post("/v1/jobs", JOB, format="json")
    assert response.status_code == 202, response.content


def test_creating_charges_needs_charges_add_charge(make_client):
    refused = make_client(VIEW, SUBMIT, REPLAY, CANCEL).post(
        "/v1/charges", {"amount": 100, "currency": "EUR"}, format="json", HTTP_IDEMPOTENCY_KEY="charge-1"
    )
    assert "charges.add_charge" in problem_of(refused, 403)["detail"]
    response = make_client(ADD_CHARGE).post(
        "/v1/charges", {"amount": 100, "currency": "EUR"}, format="json", HTTP_IDEMPOTENCY_KEY="charge-1"
    )
    assert response.status_code == 201, response.content


def test_reading_a_charge_needs_charges_view_charge(make_client):
    created = (
        make_client(ADD_CHARGE)
        .post("/v1/charges", {"amount": 100, "currency": "EUR"}, format="json", HTTP_IDEMPOTENCY_KEY="charge-2")
        .json()
    )
    path = f"/v1/charges/{created['id']}"
    assert "charges.view_charge" in problem_of(make_client(VIEW, ADD_CHARGE).get(path), 403)["detail"]
    assert make_client(VIEW_CHARGE).get(path).json()["id"] == created["id"]


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/{id}", "/v1/stats"])
def test_reads_without_view_job_are_403_problem(make_client, path):
    job = job_in(JobStatus.PENDING)
    client = make_client(REPLAY, CANCEL)  # every permission but view_job

    body = problem_of(client.get(path.format(id=job.id)), 403)
    assert "reliableq.view_job" in body["detail"]


def test_reads_with_view_job_only_are_allowed(make_client):
    job = job_in(JobStatus.PENDING)
    client = make_client(VIEW)
    for path in ("/v1/jobs", f"/v1/jobs/{job.id}", "/v1/stats"):
        assert client.get(path).status_code == 200, path


def test_replay_without_replay_job_is_403_and_the_job_stays_dead(make_client):
    job = job_in(JobStatus.DEAD)
    client = make_client(VIEW, CANCEL)

    body = problem_of(client.post(f"/v1/jobs/{job.id}/replay"), 403)

    assert "reliableq.replay_job" in body["detail"]
    assert Job.objects.get(pk=job.id).status == JobStatus.DEAD


def test_cancel_without_cancel_job_is_403_and_the_job_stays_pending(make_client):
    job = job_in(JobStatus.PENDING)
    client = make_client(VIEW, REPLAY)

    body = problem_of(client.post(f"/v1/jobs/{job.id}/cancel"), 403)

    assert "reliableq.cancel_job" in body["detail"]
    assert Job.objects.get(pk=job.id).status == JobStatus.PENDING


def test_permission_is_checked_before_existence_so_403_does_not_reveal_ids(make_client):
    client = make_client()
    problem_of(client.post(f"/v1/jobs/{uuid.uuid4()}/replay"), 403)
    problem_of(client.post(f"/v1/jobs/{uuid.uuid4()}/cancel"), 403)
    problem_of(client.get(f"/v1/jobs/{uuid.uuid4()}"), 403)


def test_replay_and_cancel_with_only_their_own_permission_succeed(make_client):
    dead, pending = job_in(JobStatus.DEAD), job_in(JobStatus.PENDING)

    assert make_client(REPLAY).post(f"/v1/jobs/{dead.id}/replay").status_code == 202
    assert make_client(CANCEL).post(f"/v1/jobs/{pending.id}/cancel").status_code == 200


def test_superuser_may_do_everything():
    admin = User.objects.create_superuser("root", email="root@example.com", password=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=admin).key}")
    dead = job_in(JobStatus.DEAD)
    assert client.get("/v1/stats").status_code == 200
    assert client.post(f"/v1/jobs/{dead.id}/replay").status_code == 202
    assert client.post(f"/v1/jobs/{dead.id}/cancel").status_code == 200
