from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from testproject import dburl

from .support import WorkerProcess, worker_env


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the database may use every alias: "default", and "queue" when the queue
    has a database of its own (QUEUE_DATABASE_URL), so that one suite runs either way. A test that
    names its `databases` keeps them (one that allows only the queue's proves nothing else is used)."""
    for item in items:
        marker = item.get_closest_marker("django_db")
        if marker is None and not {"db", "transactional_db"} & set(getattr(item, "fixturenames", ())):
            continue
        if marker is not None and "databases" in marker.kwargs:
            continue
        kwargs = {**(marker.kwargs if marker else {}), "databases": "__all__"}
        item.add_marker(pytest.mark.django_db(*(marker.args if marker else ()), **kwargs), append=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the embedded PostgreSQL servers this run started (the project's and the chaos suite's),
    so that the README's test command leaves no server behind. One it found running stays up."""
    from testproject import embedded

    embedded.stop_started_here()


@pytest.fixture
def db_url(transactional_db: None) -> str:
    """The URL of the test database, for subprocesses: committed data only (transactional tests).

    The default alias's; worker_env adds the queue's when the queue has a database of its own."""
    return dburl.build(connection.settings_dict)


@pytest.fixture
def spawn_worker(db_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real `runworker` subprocesses; every one is killed when the test ends."""
    started: list[WorkerProcess] = []
    numbers = itertools.count(1)

    def spawn(*args: str, env: dict[str, Any] | None = None) -> WorkerProcess:
        n = next(numbers)
        worker_args = list(args)
        if "--worker-id" not in worker_args:
            worker_args += ["--worker-id", f"w{n}"]
        worker = WorkerProcess(worker_args, env=worker_env(db_url, **(env or {})), log=tmp_path / f"worker-{n}.log")
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.stop()


@pytest.fixture
def per_key_kind() -> Iterator[None]:
    """test.per_key (max_running_per_key=2) registered for the test; the registry is put back as it was."""
    import reliableq
    from reliableq import registry
    from testproject.jobs import per_key

    saved = dict(registry._handlers)
    reliableq.handler("test.per_key", max_running_per_key=2)(per_key)
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


@pytest.fixture
def fair_kinds() -> Iterator[None]:
    """The fair kinds of testproject.jobs.register_fair, registered for the test; the registry is put back."""
    from reliableq import registry
    from testproject.jobs import register_fair

    saved = dict(registry._handlers)
    register_fair()
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> None:
    """The test databases commit without waiting for the WAL flush (synchronous_commit off, set on
    each test database only, so the server's other databases keep theirs). A commit is still atomic
    and visible at once; only a crash of the server itself could lose the last ones, and no test
    crashes the server: the workers they kill are clients."""
    with django_db_blocker.unblock():
        for alias in connections:
            conn = connections[alias]
            if conn.vendor != "postgresql":
                continue
            with conn.cursor() as cursor:
                cursor.execute(
                    f"ALTER DATABASE {conn.ops.quote_name(conn.settings_dict['NAME'])} SET synchronous_commit = off"
                )
            conn.close()  # the next connection takes the setting
