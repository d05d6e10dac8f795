"""While the database is away (restarting, failing over, read-only) the API answers 503 with
Retry-After, never 500, and the next request connects again: to the new primary, after a failover.
Each failure is real: a server that refuses the connection, a session whose transactions are
read-only as every transaction on a standby is."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from testproject.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)  # outside a transaction, as a request runs
JOB = {"kind": "demo.noop", "payload": {}}


def read_only_session() -> None:
    """Make this thread's connection behave as one to a standby: every write refused (25006)."""
    with connection.cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = on")


@contextlib.contextmanager
def unreachable() -> Iterator[None]:
    """The default database moved to a port where nothing listens, then back."""
    settings = connection.settings_dict
    saved = {key: settings[key] for key in ("HOST", "PORT", "OPTIONS")}
    connection.close()
    settings.update(HOST="127.0.0.1", PORT=str(free_port()), OPTIONS={**saved["OPTIONS"], "connect_timeout": 2})
    try:
        yield
    finally:
        connection.close()
        settings.update(saved)


def assert_unavailable(response: Any) -> None:
    assert response.status_code == 503, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response["Retry-After"] == "2"


def test_a_write_refused_by_a_read_only_server_is_503_and_the_next_request_connects_again(make_client):
    client = make_client("submit_job")
    assert client.post("/v1/jobs", JOB, format="json").status_code == 202
    read_only_session()
    assert_unavailable(client.post("/v1/jobs", JOB, format="json"))
    # Closed, though it still answers SELECT 1: kept, it would refuse every write until CONN_MAX_AGE.
    assert connection.connection is None
    assert client.post("/v1/jobs", JOB, format="json").status_code == 202


def test_a_database_that_refuses_connections_is_503_at_the_token_lookup_not_500(make_client):
    client = make_client("submit_job")
    with unreachable():
        response = client.post("/v1/jobs", JOB, format="json")
        assert_unavailable(response)
        assert response.json()["type"].endswith("/database_unavailable")
        assert "Idempotency-Key" in response.json()["detail"]
        assert_unavailable(client.get("/v1/stats"))
    assert client.post("/v1/jobs", JOB, format="json").status_code == 202


def test_ready_says_not_ready_on_a_read_only_server_and_ready_once_it_is_not(anon):
    read_only_session()
    response = anon.get("/v1/ready")
    assert response.status_code == 503
    assert "read-only" in response.json()["detail"]
    assert anon.get("/v1/ready").status_code == 200, "the next check connects again"
