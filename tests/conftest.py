from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from testproject import dburl

from .support import WorkerProcess, worker_env


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the embedded PostgreSQL servers this run started (the project's and the chaos suite's),
    so that the README's test command leaves no server behind. One it found running stays up."""
    from testproject import embedded

    embedded.stop_started_here()


@pytest.fixture
def db_url(transactional_db: None) -> str:
    """The URL of the test database, for subprocesses: committed data only (transactional tests)."""
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
