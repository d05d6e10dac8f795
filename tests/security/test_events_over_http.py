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


def waiter(name: str, log: Path) -> uuid.UUID:
    return reliableq.enqueue("steps.waiter", {"log": str(log), "event": name}).id


def test_a_stranger_without_emit_event_and_a_name_the_site_did_not_open_wake_nothing(events_site: Site, tmp_path: Path):
    order, refund = waiter("order-42-paid", tmp_path / "log"), waiter("refund-42-approved", tmp_path / "log")
    run_due()
    stranger = client(events_site, "mallory", "reliableq.submit_job", "reliableq.view_job")
    hook = client(events_site, "hooks", EMIT)

    forbidden = stranger.request("POST", "/v1/events/order-42-paid", json={"payload": {"paid": True}})
    closed = hook.request("POST", "/v1/events/refund-42-approved", json={})

    problem(forbidden, 403)
    assert "HTTP_EVENTS" in problem(closed, 400)["errors"]["name"][0]
    assert not Event.objects.exists() and not LogEntry.objects.exists()
    assert {Job.objects.get(pk=pk).status for pk in (order, refund)} == {JobStatus.WAITING}


def test_a_webhook_retried_at_once_wakes_each_waiter_a_real_worker_parked_once(
    events_site: Site, spawn_worker, tmp_path: Path
):
    log = tmp_path / "steps.log"
    waiters = [waiter("order-9-paid", log) for _ in range(2)]
    parking = spawn_worker("--burst")
    assert parking.wait(timeout=60) == 0, parking.output()[-2000:]
    assert {Job.objects.get(pk=pk).status for pk in waiters} == {JobStatus.WAITING}, "parked: no slot held"
    hook = client(events_site, "hooks", EMIT)

    def emit(_: int) -> tuple[int, int]:
        answer = hook.request("POST", "/v1/events/order-9-paid", json={"payload": {"paid": 9}})
        return answer.status_code, answer.json()["woken"]

    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = sorted(pool.map(emit, range(3)))
    resuming = spawn_worker("--burst")
    assert resuming.wait(timeout=60) == 0, resuming.output()[-2000:]
    late = hook.request("POST", "/v1/events/order-9-paid", json={"payload": {"paid": 10}})

    assert answers == [(200, 0), (200, 0), (202, 2)], answers
    assert (late.status_code, late.json()["woken"], late.json()["payload"]) == (200, 0, {"paid": 9})
    for job in Job.objects.filter(pk__in=waiters):
        assert job.status == JobStatus.SUCCEEDED and job.result == {"paid": 9} and job.attempts == 2
    runs = sorted(line.split()[1] for line in log.read_text().splitlines())
    assert runs == ["after", "after", "before", "before"], "each waiter's code before and after the wait ran once"
    assert Event.objects.count() == 1 and LogEntry.objects.count() == 1
