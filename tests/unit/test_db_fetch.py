"""db.fetch: the worker's hot statements on a cursor kept per connection, and every other case on
Django's own cursor (inside a transaction, under an execute wrapper, through a pooler)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, transaction
from django.db.transaction import TransactionManagementError

from reliableq.queue import db

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as in a worker


class Tripwire:
    """A kept cursor that fails the test if a statement reaches it."""

    def __init__(self, connection: object) -> None:
        self.connection = connection

    def execute(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the kept cursor ran a statement that needed Django's cursor")


class Counting:
    """A kept cursor that records the statements it runs."""

    def __init__(self, cursor: Any) -> None:
        self.cursor, self.connection, self.statements = cursor, cursor.connection, []

    def execute(self, sql: str, params: Any, **options: Any) -> None:
        self.statements.append(sql)
        self.cursor.execute(sql, params, **options)

    def fetchall(self) -> Any:
        return self.cursor.fetchall()


@pytest.fixture(autouse=True)
def _forget_the_kept_cursor():  # type: ignore[no-untyped-def]
    yield
    db._kept.pop(db.connection(), None)  # no tripwire left for the next test


def kept() -> Any:
    return db._kept.get(db.connection())


def test_the_second_statement_runs_on_the_cursor_kept_for_the_connection() -> None:
    assert db.fetch("SELECT %s::int + 1", [1]) == [(2,)]
    cursor = kept()
    assert cursor is not None and cursor.connection is db.connection().connection

    assert db.fetch("SELECT %s::text", ["x"]) == [("x",)]
    assert kept() is cursor

    db._kept[db.connection()] = Tripwire(db.connection().connection)
    with pytest.raises(AssertionError, match="kept cursor"):
        db.fetch("SELECT 1", [])


def test_inside_a_transaction_statements_take_the_kept_cursor_and_a_broken_one_refuses_them() -> None:
    """A view's enqueue runs in the view's transaction: it takes the kept cursor too, and Django's
    rule holds on it: after an error inside atomic(), no statement runs until the block ends."""
    db.fetch("SELECT 1", [])
    counting = db._kept[db.connection()] = Counting(kept())
    with db.atomic():
        assert db.fetch("SELECT 2", []) == [(2,)]
        assert counting.statements == ["SELECT 2"]
        with pytest.raises(DatabaseError, match="division by zero"):
            db.fetch("SELECT 1 / %s::int", [0])
        db.connection().needs_rollback = True  # what atomic() marks when the error leaves an inner block
        with pytest.raises(TransactionManagementError):
            db.fetch("SELECT 3", [])
    assert db.fetch("SELECT 4", []) == [(4,)]  # the block rolled back; the connection serves on


def test_under_an_execute_wrapper_statements_take_djangos_cursor() -> None:
    db.fetch("SELECT 1", [])
    db._kept[db.connection()] = Tripwire(db.connection().connection)
    seen = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(sql, params, many, context)

    with db.connection().execute_wrapper(wrapper):
        assert db.fetch("SELECT 3", []) == [(3,)]
    assert seen == ["SELECT 3"]


def test_an_error_on_the_kept_cursor_is_djangos_and_leaves_the_connection_usable() -> None:
    db.fetch("SELECT 1", [])
    assert kept() is not None

    with pytest.raises(DatabaseError, match="division by zero"):
        db.fetch("SELECT 1 / %s::int", [0])
    assert db.fetch("SELECT 4", []) == [(4,)]
    with transaction.atomic(using=db.alias()):  # no transaction was left open or aborted
        assert db.fetch("SELECT 5", []) == [(5,)]


def test_a_closed_connection_is_opened_again_with_a_cursor_of_its_own() -> None:
    db.fetch("SELECT 1", [])
    before = kept()
    db.connection().close()

    assert db.fetch("SELECT 6", []) == [(6,)]
    after = kept()
    assert after is not before and after.connection is db.connection().connection


def test_a_connection_that_may_not_prepare_keeps_no_cursor() -> None:
    conn = db.connection()
    conn.ensure_connection()
    db._kept.pop(conn, None)
    db._direct[conn.connection] = False  # as through a pooler in transaction mode
    try:
        assert db.fetch("SELECT 7", []) == [(7,)]
        assert kept() is None
    finally:
        conn.close()  # the next test's connection is a direct one again
