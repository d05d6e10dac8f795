"""POST /v1/events/<name> attacked over real HTTP: an event wakes whatever waits for its name, so a
stranger who could emit `order-42-paid` could ship an unpaid order. Refused unless the user holds
reliableq.emit_event and the site opened the name (HTTP_EVENTS); a retried emit wakes nothing twice."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

import reliableq
from reliableq.models import Event, Job, JobStatus
from reliableq.testing import run_due
from testproject import accounts, processes

from .conftest import Client, Site, problem, start_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EMIT = "reliableq.emit_event"


@pytest.fixture
def events_site(db_url: str, tmp_path: Path) -> Iterator[Site]:
    """A site that opens the names `order-*-paid` to HTTP, and only them."""
    site = start_site(tmp_path, db_url, RELIABLEQ_HTTP_EVENTS='["order-*-paid"]')
    try:
        yield site
    finally:
        processes.stop(site.process)


def client(site: Site, username: str, *perms: str) -> Client:
    user = accounts.grant(User.objects.create_user(username), *perms)
    return Client(site=site, user=user, token=Token.objects.create(user=user).key)


def waiter(name: str, tmp_path: Path) -> uuid.UUID:
    job_id = reliableq.enqueue("steps.waiter", {"log": str(tmp_path / "log"), "event": name}).id
    run_due()
    assert Job.objects.get(pk=job_id).status == JobStatus.WAITING
    return job_id


def test_a_stranger_without_emit_event_cannot_wake_a_waiting_order(events_site: Site, tmp_path: Path):
    job_id = waiter("order-42-paid", tmp_path)
    stranger = client(events_site, "mallory", "reliableq.submit_job", "reliableq.view_job")

    answer = stranger.request("POST", "/v1/events/order-42-paid", json={"payload": {"paid": True}})

    problem(answer, 403)
    assert not Event.objects.exists() and not LogEntry.objects.exists()
    assert Job.objects.get(pk=job_id).status == JobStatus.WAITING


def test_a_name_the_site_did_not_open_is_400_and_wakes_nothing(events_site: Site, tmp_path: Path):
    job_id = waiter("refund-42-approved", tmp_path)
    emitter = client(events_site, "hooks", EMIT)

    answer = emitter.request("POST", "/v1/events/refund-42-approved", json={})

    assert "HTTP_EVENTS" in problem(answer, 400)["errors"]["name"][0]
    assert not Event.objects.exists() and not LogEntry.objects.exists()
    assert Job.objects.get(pk=job_id).status == JobStatus.WAITING


def test_a_retried_emit_racing_the_first_wakes_each_waiter_once(events_site: Site, tmp_path: Path):
    waiters = [waiter("order-7-paid", tmp_path) for _ in range(2)]
    emitter = client(events_site, "hooks", EMIT)

    def emit(amount: int) -> tuple[int, int]:
        answer = emitter.request("POST", "/v1/events/order-7-paid", json={"payload": {"amount": amount}})
        return answer.status_code, answer.json()["woken"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = sorted(pool.map(emit, range(4)))
    [ran_first, ran_second] = run_due()
    late = emitter.request("POST", "/v1/events/order-7-paid", json={"payload": {"amount": 99}})

    assert answers[:3] == [(200, 0)] * 3 and answers[3] == (202, 2), answers
    assert {ran_first.status, ran_second.status} == {JobStatus.SUCCEEDED}
    assert late.status_code == 200 and late.json()["woken"] == 0
    assert not run_due(), "nothing woken again"
    assert [j.attempts for j in Job.objects.filter(pk__in=waiters)] == [2, 2], "parked once, run once"
    assert Event.objects.count() == 1 and LogEntry.objects.count() == 1
