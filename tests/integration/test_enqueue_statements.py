"""What one enqueue sends: a gate on its round trips (docs/internals/enqueue.md), counted by an
execute wrapper rather than timed, so that a loaded machine cannot break it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import pytest
from django.db import transaction

import reliableq
from reliableq.models import Job
from reliableq.queue import db
from reliableq.services.enqueueing import NewJob, submit_many

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


def test_only_an_enqueue_with_a_key_asks_its_insert_to_give_way_on_conflict() -> None:
    """A job with neither dedupe_key nor unique_key meets no other row's key: its INSERT is plain,
    spared the speculative insertion that ON CONFLICT makes (the arbiter indexes probed first, the
    row confirmed by one more WAL record). A job with a key keeps it: two callers, one row."""
    with statements() as seen:
        reliableq.enqueue("demo.noop", {})
        reliableq.enqueue("demo.noop", {}, unique_key="u")
        reliableq.enqueue("demo.noop", {}, dedupe_key="d")
        reliableq.enqueue("demo.noop", {}, dedupe_key="d")
    inserts = [sql for sql in seen if "INSERT INTO" in sql]  # a key that finds its job reads it after
    assert ["ON CONFLICT" in sql for sql in inserts] == [False, True, True, True], seen
    assert Job.objects.filter(dedupe_key="d").count() == 1

    batch = [NewJob(kind="demo.noop", payload={}), NewJob(kind="demo.noop", payload={})]
    with statements() as seen:
        submit_many(batch)
        submit_many(batch, key="b")
        submit_many(batch, key="b")  # the same batch again: its jobs come back, none made
    inserts = [sql for sql in seen if "INSERT INTO reliableq_job" in sql]
    assert ["ON CONFLICT" in sql for sql in inserts] == [False, True, True], seen
    assert Job.objects.count() == 3 + 2 + 2  # the enqueues above, the batch without a key, the keyed one once


def prepared_inserts() -> int:
    with db.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%INSERT INTO reliableq_job%"]
        )
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("atomic", [False, True])
def test_an_enqueue_is_prepared_once_per_connection(atomic: bool) -> None:
    """The INSERT a view's enqueue sends is parsed and planned once per connection, as the worker's
    statements are, in autocommit and inside the caller's transaction alike."""
    db.connection().close()  # a connection of its own: nothing prepared on it yet
    for n in range(3):
        with transaction.atomic() if atomic else nullcontext():
            reliableq.enqueue("demo.noop", {"n": n})
        assert prepared_inserts() == 1
