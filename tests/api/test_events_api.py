"""POST /v1/events/<name>: who may emit, which names, what it answers, what it records."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.core.cache import cache

import reliableq
from reliableq.models import Event, Job, JobStatus
from reliableq.testing import run_due

from .conftest import problem_of

pytestmark = pytest.mark.django_db
EMIT = "emit_event"


@pytest.fixture
def open_events(settings: Any) -> None:
    settings.RELIABLEQ = {**settings.RELIABLEQ, "HTTP_EVENTS": ["order-*-paid", "stripe.*"]}


def waiting_for(name: str, tmp_path: Path) -> uuid.UUID:
    """A job parked WAITING for the event `name` by its own handler (steps.waiter)."""
    job_id = reliableq.enqueue("steps.waiter", {"log": str(tmp_path / "log"), "event": name}).id
    [parked] = run_due()
    assert parked.status == JobStatus.WAITING
    return job_id


@pytest.mark.usefixtures("open_events")
def test_an_emit_wakes_its_waiters_once_and_the_same_name_again_answers_the_first_event(make_client, tmp_path):
    job_id = waiting_for("order-42-paid", tmp_path)
    client = make_client(EMIT)

    first = client.post("/v1/events/order-42-paid", {"payload": {"amount": 42}}, format="json")
    again = client.post("/v1/events/order-42-paid", {"payload": {"amount": 43}}, format="json")

    assert first.status_code == 202, first.content
    assert first.json()["name"] == "order-42-paid" and first.json()["payload"] == {"amount": 42}
    assert first.json()["woken"] == 1 and first.json()["emitted_at"].endswith("Z")
    assert again.status_code == 200 and again.json()["payload"] == {"amount": 42} and again.json()["woken"] == 0
    job = Job.objects.get(pk=job_id)
    assert job.status == JobStatus.PENDING and job.waiting_for is None
    assert Event.objects.get().emitted_by == "user1"
    [ran] = run_due()
    assert ran.return_value == {"amount": 42}


@pytest.mark.usefixtures("open_events")
def test_an_emit_without_a_body_records_no_payload_and_is_audited_once(make_client):
    client = make_client(EMIT)
    assert client.post("/v1/events/stripe.evt_1").status_code == 202
    assert client.post("/v1/events/stripe.evt_1").status_code == 200
    assert Event.objects.get().payload is None
    [entry] = LogEntry.objects.all()
    assert entry.user.username == "user1" and "Emitted the event: 0 job(s) woken." in entry.get_change_message()


@pytest.mark.usefixtures("open_events")
def test_a_user_without_emit_event_gets_403_and_nothing_is_recorded(make_client, tmp_path):
    job_id = waiting_for("order-7-paid", tmp_path)
    refused = make_client("submit_job", "view_job").post("/v1/events/order-7-paid", {}, format="json")
    problem_of(refused, 403)
    assert "reliableq.emit_event" in refused.json()["detail"]
    assert not Event.objects.exists() and Job.objects.get(pk=job_id).status == JobStatus.WAITING


def test_no_name_is_open_to_http_by_default(make_client, tmp_path):
    job_id = waiting_for("order-9-paid", tmp_path)
    body = problem_of(make_client(EMIT).post("/v1/events/order-9-paid", {}, format="json"), 400)
    assert "HTTP_EVENTS" in body["errors"]["name"][0]
    assert not Event.objects.exists() and Job.objects.get(pk=job_id).status == JobStatus.WAITING


@pytest.mark.usefixtures("open_events")
@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("order-1-shipped", {}),  # no pattern matches
        ("ORDER-1-PAID", {}),  # patterns are case-sensitive
        ("stripe." + "x" * 300, {}),  # over 255 characters
        ("stripe.nul%00", {}),  # a NUL a text column cannot store
        ("stripe.a", {"payload": [1, 2]}),  # a payload that is not an object
        ("stripe.a", {"payload": {}, "extra": 1}),  # an unknown field
        ("stripe.a", [1]),  # a body that is not an object
    ],
)
def test_a_bad_or_closed_name_or_a_bad_body_is_400_and_records_nothing(make_client, name, body):
    problem_of(make_client(EMIT).post(f"/v1/events/{name}", body, format="json"), 400)
    assert not Event.objects.exists() and not LogEntry.objects.exists()


@pytest.mark.usefixtures("open_events")
def test_an_oversize_payload_is_413_and_not_json_is_415(settings, make_client):
    settings.RELIABLEQ = {**settings.RELIABLEQ, "MAX_PAYLOAD_BYTES": 100}
    client = make_client(EMIT)
    problem_of(client.post("/v1/events/stripe.big", {"payload": {"x": "y" * 200}}, format="json"), 413)
    problem_of(client.post("/v1/events/stripe.big", "x=1", content_type="application/x-www-form-urlencoded"), 415)
    problem_of(client.post("/v1/events/stripe.big?verbose=1", {}, format="json"), 400)
    assert not Event.objects.exists()


@pytest.mark.usefixtures("open_events")
def test_emits_are_throttled_with_submissions(settings, make_client):
    cache.clear()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"reliableq_submit": "2/d"}}
    client = make_client(EMIT, "submit_job")
    assert client.post("/v1/jobs", {"kind": "demo.noop", "payload": {}}, format="json").status_code == 202
    assert client.post("/v1/events/stripe.a").status_code == 202
    refused = client.post("/v1/events/stripe.b")
    problem_of(refused, 429)
    assert int(refused["Retry-After"]) > 0 and not Event.objects.filter(name="stripe.b").exists()
    cache.clear()


def test_anonymous_is_401(anon, settings):
    settings.RELIABLEQ = {**settings.RELIABLEQ, "HTTP_EVENTS": ["*"]}
    problem_of(anon.post("/v1/events/anything", {}, format="json"), 401)
    assert not Event.objects.exists()
