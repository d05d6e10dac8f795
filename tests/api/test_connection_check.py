"""The token lookup is the request's connection health check (CONN_HEALTH_CHECKS): one round trip
fewer per API request, and a persistent connection that died between requests is still replaced
before anything is answered, as Django's own check would do."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection

from reliableq.models import Job
from reliableq.queue import tokens
from testproject import dburl

pytestmark = pytest.mark.django_db(transaction=True)  # outside a transaction, as a request runs
JOB = {"kind": "demo.noop", "payload": {}}


@pytest.fixture
def pending_check(make_client: Any) -> Any:
    """A client whose first request opened the connection; the next one starts as a new request
    on a persistent connection does (Django's request_started handler; the test client skips it)."""
    client = make_client("submit_job")
    assert client.post("/v1/jobs", JOB, format="json").status_code == 202
    assert connection.health_check_enabled, "testproject sets CONN_HEALTH_CHECKS"
    connection.health_check_done = False
    return client


def test_a_live_connection_is_checked_by_the_token_lookup_itself(pending_check, monkeypatch):
    checks = []
    monkeypatch.setattr(connection, "is_usable", lambda: checks.append(1) or True)
    assert pending_check.post("/v1/jobs", JOB, format="json").status_code == 202
    assert checks == [], "no SELECT 1 before the token lookup"
    assert connection.health_check_done


def test_a_connection_that_died_between_requests_is_replaced_and_the_request_succeeds(pending_check):
    before = connection.connection.info.backend_pid
    with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [before])
    response = pending_check.post("/v1/jobs", JOB, format="json")
    assert response.status_code == 202, response.content
    assert connection.connection.info.backend_pid != before
    assert Job.objects.filter(pk=response.json()["id"]).exists()


def test_a_failure_on_a_live_connection_is_raised_not_retried(pending_check, monkeypatch):
    calls = []

    def failing(*args: Any) -> Any:
        calls.append(1)
        raise DatabaseError("boom")

    monkeypatch.setattr(tokens, "fetch_one", failing)
    with pytest.raises(DatabaseError, match="boom"):
        pending_check.post("/v1/jobs", JOB, format="json")
    assert calls == [1]
