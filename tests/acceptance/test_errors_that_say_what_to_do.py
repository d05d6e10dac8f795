"""The first hour (issue 31, point 2): errors that say what to do, from the places a new user meets them."""

from __future__ import annotations

import datetime as dt
import signal
import uuid

import psycopg
import pytest
from django.core.checks import Error
from django.db import connection
from django.test import override_settings

import reliableq
from reliableq import checks
from reliableq.models import JobStatus
from testproject import dburl
from tests.support import wait_until

from .helpers import is_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_worker_without_the_queues_tables_exits_at_once_saying_to_migrate(spawn_worker):
    """Before: it logged "started", then retried `relation "reliableq_leader" does not exist` forever."""
    name = f"rq_unmigrated_{uuid.uuid4().hex[:8]}"
    admin = dburl.build({**connection.settings_dict, "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        empty = dburl.build({**connection.settings_dict, "NAME": name})
        worker = spawn_worker("--burst", env={"DATABASE_URL": empty, "QUEUE_DATABASE_URL": ""})
        code = worker.wait(timeout=60)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert code == 1, worker.output()
    assert "ReliableQ migration(s) not applied: run manage.py migrate" in worker.output()
    assert "started" not in worker.output() and "retrying" not in worker.output()


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("LEASE_SECONDS", "thirty", "a number greater than 0"),
        ("LEASE_SECONDS", -5, "a number greater than 0"),
        ("MAX_ATTEMPTS", 2.5, "an integer at least 1"),
        ("LISTEN_NOTIFY", "yes", "one of True, False"),
        ("ISOLATION", "fork", "one of 'thread', 'process'"),
        ("HTTP_QUEUES", "default", 'a list of queue names, or ["*"] for any'),
        ("HTTP_EVENTS", "stripe.*", 'a list of shell-style patterns of event names ("stripe.*"), or ["*"] for any'),
        ("MAX_PENDING_PER_SUBMITTER", 0, "an integer at least 1 (or None)"),
        ("CHILD_MAX_MEMORY_MB", True, "a number greater than 0 (or None)"),
        ("FAIR_WEIGHTS", {"tenant-1": 0}, "a dict from fair_key to a weight between 0.001 and 1000"),
        ("FAIR_WEIGHTS", ["tenant-1"], "a dict from fair_key to a weight between 0.001 and 1000"),
    ],
)
def test_check_names_the_key_the_value_and_what_is_allowed(settings, key, value, allowed):
    """Before: LEASE_SECONDS = "thirty" passed `check`, then runworker died with a ValueError."""
    with override_settings(RELIABLEQ={**settings.RELIABLEQ, key: value}):
        found = [m for m in checks.check_settings() if m.id == "reliableq.E005"]
    assert len(found) == 1 and isinstance(found[0], Error)
    assert found[0].msg == f"RELIABLEQ[{key!r}] is {value!r}: it must be {allowed}."


def test_runworker_refuses_to_start_with_a_bad_setting(spawn_worker, tmp_path):
    worker = spawn_worker("--burst", env={"RELIABLEQ_MAX_SNOOZES": "-1"})
    assert worker.wait(timeout=60) == 1
    assert "reliableq.E005" in worker.output() and "RELIABLEQ['MAX_SNOOZES'] is -1" in worker.output()


def test_an_unknown_kind_suggests_the_closest_registered_ones():
    with pytest.raises(reliableq.UnknownKind, match=r"Did you mean 'demo\.noop'\?"):
        reliableq.enqueue("demo.noops", {})
    with pytest.raises(reliableq.UnknownKind) as nothing_close:
        reliableq.enqueue("zzzz", {})
    assert "Did you mean" not in str(nothing_close.value)


def test_over_http_a_near_miss_kind_names_no_registered_kind():
    """A stranger with submit_job must not learn which kinds exist by guessing close names."""
    from django.contrib.auth.models import Permission, User
    from rest_framework.test import APIClient

    user = User.objects.create_user("guesser")
    user.user_permissions.add(Permission.objects.get(codename="submit_job"))
    client = APIClient()
    client.force_authenticate(user)

    response = client.post("/v1/jobs", {"kind": "demo.noops", "payload": {}}, format="json")

    assert response.status_code == 400
    assert "Did you mean" not in response.content.decode() and "demo.noop'" not in response.content.decode()


def test_an_unstorable_payload_names_the_path_of_the_offending_value():
    with pytest.raises(reliableq.InvalidJob, match=r'at payload\["order"\]\["when"\]: Object of type datetime'):
        reliableq.enqueue("demo.noop", {"order": {"id": 7, "when": dt.datetime(2030, 1, 1)}})
    with pytest.raises(reliableq.InvalidJob, match=r'at payload\["items"\]\[1\]'):
        reliableq.enqueue("demo.noop", {"items": [1, {2, 3}]})


def test_the_first_sigint_says_what_it_drains_for_how_long_and_what_a_second_does(spawn_worker):
    """Before: the first Ctrl-C printed nothing (only the second said it abandoned a lease)."""
    running = reliableq.enqueue("test.sleep", {"seconds": 1})
    worker = spawn_worker("--grace-seconds", "12")
    wait_until(is_status(running.id, JobStatus.RUNNING), timeout=15, what="the claim")
    worker.signal(signal.SIGINT)
    assert worker.wait(timeout=20) == 0
    assert (
        "SIGINT: no more claims; draining 1 running job(s) for up to 12s. A second signal abandons them now"
        in worker.output()
    ), worker.output()
