"""What one enqueue sends: a gate on its round trips (docs/internals/enqueue.md), counted by an
execute wrapper rather than timed, so that a loaded machine cannot break it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import transaction

import reliableq
from reliableq.queue import db

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def statements() -> Iterator[list[str]]:
    seen: list[str] = []

    def count(execute: Callable[..., object], sql: str, params: object, many: bool, context: object) -> object:
        seen.append(sql)
        return execute(sql, params, many, context)

    with db.connection().execute_wrapper(count):
        yield seen


def test_an_enqueue_is_one_statement_in_autocommit_and_in_an_atomic_block() -> None:
    reliableq.enqueue("demo.noop", {})  # the connection opened, its first-use probes done
    with statements() as seen:
        reliableq.enqueue("demo.noop", {"n": 1})
    assert len(seen) == 1, seen
    with statements() as seen, transaction.atomic():
        reliableq.enqueue("demo.noop", {"n": 2})
    assert len(seen) == 1, seen


@pytest.mark.parametrize(("debounce", "again"), [(None, 2), (30, 1)])
def test_a_keyed_enqueue_reads_only_when_its_key_is_taken(debounce: float | None, again: int) -> None:
    """A unique_key that finds its job reads it after the INSERT that conflicted; a debounce's
    upsert returns the job's row itself."""
    options = {"unique_key": "k"} if debounce is None else {"unique_key": "k", "debounce": debounce}
    with statements() as seen:
        reliableq.enqueue("demo.noop", {"n": 1}, **options)
    assert len(seen) == 1, seen
    with statements() as seen:
        reliableq.enqueue("demo.noop", {"n": 2}, **options)
    assert len(seen) == again, seen
