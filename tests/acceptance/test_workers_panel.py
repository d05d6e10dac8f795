"""The workers panel (issue 31, point 3): workers record themselves through their heartbeat; the admin
lists them, the dashboard and the metrics flag a queue with due jobs that no live worker serves."""

from __future__ import annotations

import datetime as dt
import re
import signal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

import reliableq
from reliableq import services
from reliableq.models import Worker
from testproject import accounts
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def operator() -> Client:
    user = accounts.grant(User.objects.create_user("olga", is_staff=True), "reliableq.view_job")
    client = Client()
    client.force_login(user)
    return client


def test_a_worker_is_listed_live_and_the_queue_nobody_serves_is_flagged(spawn_worker):
    worker = spawn_worker("--queues", "default,reports", "--concurrency", "3", "--worker-id", "host-a:1")
    row = wait_until(lambda: Worker.objects.filter(pk="host-a:1").first(), timeout=30, what="the worker's row")
    reliableq.enqueue("demo.noop", {}, queue="orphan")
    wait_until(lambda: Worker.objects.get(pk="host-a:1").last_seen_at > row.started_at, timeout=30)
    client = operator()

    listing = client.get("/admin/reliableq/worker/").content.decode()
    dashboard = client.get("/admin/reliableq/queuedashboard/").content.decode()
    metrics = client.get("/v1/metrics").content.decode()

    assert (row.queues, row.concurrency, row.pid) == (["default", "reports"], 3, worker.pid)
    # What it runs: testproject has thread, async and isolation="process" handlers (issue 50: "thread").
    assert row.isolation == "per handler" and row.host and row.version == "0.1.0"
    assert "host-a:1" in listing and ">live<" in listing and "default, reports" in listing
    orphan = re.search(r'<tr id="queue-orphan">.*?</tr>', dashboard, re.S)
    assert orphan and "no live worker serves this queue" in orphan.group(0)
    assert "1 live worker" in dashboard
    assert re.search(r'^reliableq_queue_unserved\{queue="orphan"\} 1\.0$', metrics, re.M), metrics
    assert re.search(r"^reliableq_workers 1\.0$", metrics, re.M)

    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert Worker.objects.get(pk="host-a:1").stopped_at is not None
    after = client.get("/admin/reliableq/worker/").content.decode()
    assert ">stopped<" in after
    assert re.search(r"^reliableq_workers 0\.0$", client.get("/v1/metrics").content.decode(), re.M)


def test_the_maintenance_leader_prunes_workers_gone_for_a_day():
    old = timezone.now() - dt.timedelta(days=2)
    Worker.objects.create(id="gone:1", host="h", pid=1, queues=["default"], concurrency=1, lease_seconds=30)
    Worker.objects.create(id="recent:1", host="h", pid=2, queues=["default"], concurrency=1, lease_seconds=30)
    Worker.objects.filter(pk="gone:1").update(last_seen_at=old)
    services.retain()
    assert list(Worker.objects.values_list("id", flat=True)) == ["recent:1"]


def test_a_stranger_without_view_job_cannot_list_workers(spawn_worker):
    user = User.objects.create_user("stranger", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get("/admin/reliableq/worker/").status_code == 403
