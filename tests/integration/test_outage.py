"""Which database errors mean "the database is away, try again" (reliableq.outage), each one made for
real on PostgreSQL: a refused connection, a read-only transaction, a terminated session, against a
statement's own errors, which are no outage."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from charges.models import Charge
from reliableq import outage
from testproject import dburl
from testproject.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def raised(work: Callable[[], Any]) -> BaseException:
    try:
        work()
    except Exception as exc:
        return exc
    raise AssertionError("nothing was raised")


def execute(sql: str, wrapper: BaseDatabaseWrapper = connection) -> None:
    with wrapper.cursor() as cursor:
        cursor.execute(sql)


def unreachable() -> BaseDatabaseWrapper:
    """A real Django connection to a port where nothing listens."""
    settings = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": str(free_port())}
    settings["OPTIONS"] = {**settings.get("OPTIONS", {}), "connect_timeout": 2}
    return type(connections["default"])(settings, alias="unreachable")


def test_a_refused_connection_is_an_outage_through_django_and_through_psycopg() -> None:
    wrapper = unreachable()
    exc = raised(lambda: execute("SELECT 1", wrapper))
    assert isinstance(exc, DatabaseError) and outage.unavailable(exc) and not outage.read_only(exc)
    raw = raised(lambda: psycopg.connect(dburl.build(wrapper.settings_dict)))
    assert outage.unavailable(raw)
    assert "\n" not in outage.summary(raw) and len(outage.summary(raw)) <= outage.SUMMARY_CHARS


def test_a_read_only_transaction_is_an_outage_and_says_so() -> None:
    execute("SET default_transaction_read_only = on")  # what every transaction on a standby is
    try:
        exc = raised(lambda: execute("CREATE TABLE rq_outage_probe (id int)"))
    finally:
        connection.close()
    assert outage.sqlstate(exc) == "25006"
    assert outage.unavailable(exc) and outage.read_only(exc)


def test_a_terminated_session_is_an_outage() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    exc = raised(lambda: execute("SELECT 1"))
    connection.close()
    assert outage.unavailable(exc), (outage.sqlstate(exc), exc)


@pytest.mark.parametrize(
    ("statement", "code"),
    [
        ("SELECT 1 / 0", "22012"),
        ("SELECT * FROM rq_no_such_table", "42P01"),
        ("SET statement_timeout = 1; SELECT pg_sleep(1)", "57014"),  # canceled: the statement's, not the server's
        ("SELECT 'x'::int", "22P02"),
    ],
)
def test_a_statements_own_error_is_no_outage(statement: str, code: str) -> None:
    exc = raised(lambda: execute(statement))
    connection.close()
    assert outage.sqlstate(exc) == code
    assert not outage.unavailable(exc)


def test_a_unique_violation_is_no_outage() -> None:
    key = f"outage-{uuid.uuid4()}"
    Charge.objects.create(idempotency_key=key, amount=1, currency="EUR", request_fingerprint="")
    exc = raised(lambda: Charge.objects.create(idempotency_key=key, amount=1, currency="EUR", request_fingerprint=""))
    assert outage.sqlstate(exc) == "23505" and not outage.unavailable(exc)


def test_only_the_connections_that_failed_are_dropped() -> None:
    execute("SELECT 1")
    assert connection.connection is not None
    outage.drop_failed_connections()
    assert connection.connection is not None, "a healthy connection is kept"
    execute("SET default_transaction_read_only = on")
    raised(lambda: execute("CREATE TABLE rq_outage_probe (id int)"))
    assert connection.is_usable(), "a read-only server still answers SELECT 1"
    outage.drop_failed_connections()
    assert connection.connection is None
    for alias in connections:
        connections[alias].close()


def test_a_primary_is_not_on_a_standby() -> None:
    execute("SELECT 1")
    assert not outage.on_standby(connection)
    assert connection.connection.info.parameter_status("in_hot_standby") == "off"
