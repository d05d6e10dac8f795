"""The three queues under test, behind one interface: load jobs, start workers, read what happened.

ReliableQ, procrastinate (its Django integration) and Django's tasks framework with the
django-tasks-db backend all run on the harness's one PostgreSQL, in the database bench.settings
names, each with its own tables. Timings come from the database rows each system writes
(when a job was created, started, finished), so every system is timed the same way.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connection, transaction

from .core import Procs, child_env, wait_for

QUEUE = "bench"


@dataclass
class Outcome:
    """The state of a system's jobs after a run, read from its tables."""

    total: int
    succeeded: int
    dead: int  # failed for good (DEAD, failed, FAILED)
    unfinished: int
    attempts: int  # attempts recorded (sum over jobs)
    attempt_rows: int  # rows of attempt history, where the system keeps one (else == attempts)
    open_attempts: int  # attempt rows still marked running
    first_start: float  # epoch seconds (the system's own clock: the database's for ReliableQ)
    last_finish: float

    @property
    def span(self) -> float:
        return self.last_finish - self.first_start if self.total else math.nan


def _one(sql: str, params: Any = None) -> tuple[Any, ...]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _all(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _exec(sql: str, params: Any = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


class System:
    name = "?"
    key = "?"
    available = True

    def reset(self) -> None:
        raise NotImplementedError

    def load(self, n: int, job: str, payload: dict[str, Any] | None = None) -> None:
        """Insert n due jobs in one transaction; they are visible to workers once it commits."""
        raise NotImplementedError

    def enqueue(self, job: str, *, atomic: bool = False) -> None:
        """One job through the system's public API: its own transaction, or inside transaction.atomic()."""
        raise NotImplementedError

    def enqueue_bulk(self, n: int) -> None:
        """n jobs in one transaction through the system's bulk API (None: it has none)."""
        raise NotImplementedError

    has_bulk = True

    def unfinished(self) -> int:
        raise NotImplementedError

    def outcome(self) -> Outcome:
        raise NotImplementedError

    def latencies(self) -> list[tuple[float, float]]:
        """(enqueue-to-start, enqueue-to-finish) seconds of every finished job."""
        raise NotImplementedError

    def start_workers(self, procs: Procs, *, processes: int, concurrency: int, tag: str, **env: Any) -> None:
        raise NotImplementedError

    def describe(self, processes: int, concurrency: int) -> str:
        return f"{processes} x {concurrency}"

    def warm_up(self, procs: Procs, slots: int) -> None:
        """Run a few jobs through freshly started workers, so that start-up is not measured."""
        self.reset()
        self.load(max(8, 2 * slots), "noop")
        wait_for(
            lambda: self.unfinished() == 0,
            timeout=120,
            interval=0.1,
            what=f"{self.name} workers to run their warm-up jobs",
            procs=procs,
        )
        self.reset()


# -- ReliableQ ---------------------------------------------------------------------------


class ReliableQ(System):
    name = "ReliableQ"
    key = "reliableq"
    KINDS = {
        "noop": "bench.noop",
        "sleep": "bench.sleep",
        "async_sleep": "bench.async_sleep",
        "sleep_for": "bench.sleep_for",
        "isolated_noop": "bench.isolated_noop",
        "flaky": "bench.flaky",
        "hold": "bench.hold",
        "keyed": "bench.keyed",
        "rated": "bench.rated",
        "fair": "bench.fair",
    }

    def reset(self) -> None:
        # Running workers may be in a claim (the job, then its attempt) or a finish (the job, then its
        # return value) while the bench truncates: TRUNCATE takes its locks in the order it names the
        # tables, so it names them in the workers' order; it once named the attempts first, waited for
        # a claim's lock on the jobs while that claim waited for the attempts, and lost a deadlock.
        # Other statements (the leader's retention) lock these tables in their own order: on a
        # deadlock, try again.
        for tries_left in range(4, -1, -1):
            try:
                with transaction.atomic():
                    _exec(
                        "TRUNCATE reliableq_job, reliableq_attempt, reliableq_returnvalue, reliableq_batchkey, "
                        "reliableq_ratewindow, reliableq_step"
                    )
                return
            except DatabaseError as error:
                if tries_left == 0 or getattr(error.__cause__, "sqlstate", None) != "40P01":
                    raise

    def load(self, n: int, job: str, payload: dict[str, Any] | None = None, *, queue: str = QUEUE) -> None:
        self.enqueue_bulk(n, job, payload, queue=queue)

    def enqueue(self, job: str, *, atomic: bool = False, queue: str = QUEUE) -> None:
        import reliableq

        if atomic:
            with transaction.atomic():
                reliableq.enqueue(self.KINDS[job], {}, queue=queue)
        else:
            reliableq.enqueue(self.KINDS[job], {}, queue=queue)

    def enqueue_bulk(
        self, n: int, job: str = "noop", payload: dict[str, Any] | None = None, *, queue: str = QUEUE
    ) -> None:
        from reliableq import JobOptions, services

        kind = self.KINDS.get(job, job)
        with transaction.atomic():
            if job == "keyed":  # spread over the keys, in order, so that neighbours in the queue differ
                from .jobs import KEYS

                services.submit_many(
                    [
                        services.NewJob(
                            kind=kind,
                            payload=payload or {},
                            options=JobOptions(queue=queue, concurrency_key=f"k{i % KEYS}"),
                        )
                        for i in range(n)
                    ]
                )
            else:
                services.enqueue_many(kind, [payload or {}] * n, queue=queue)

    def running(self) -> int:
        return _one("SELECT count(*) FROM reliableq_job WHERE status = 'RUNNING'")[0]

    def unfinished(self) -> int:
        # Through the two partial indexes, each matched by its own predicate: `status IN (...)` matches
        # neither, and no index holds every status any more (migration 0008), so that read the whole
        # table, finished rows included: at 1M finished rows, polled every 50 ms, it took a core of
        # the two from the fleet it was timing.
        return _one(
            "SELECT (SELECT count(*) FROM reliableq_job WHERE status = 'PENDING')"
            " + (SELECT count(*) FROM reliableq_job WHERE status = 'RUNNING')"
        )[0]

    def outcome(self, where: str = "TRUE", params: Any = None) -> Outcome:
        total, succeeded, dead, unfinished, attempts, last_finish = _one(
            f"""
            SELECT count(*), count(*) FILTER (WHERE status = 'SUCCEEDED'), count(*) FILTER (WHERE status = 'DEAD'),
                   count(*) FILTER (WHERE status IN ('PENDING', 'RUNNING')), coalesce(sum(attempts), 0),
                   extract(epoch FROM max(finished_at))
              FROM reliableq_job j WHERE {where}
            """,
            params,
        )
        rows, open_rows, first_start = _one(
            f"""
            SELECT count(*), count(*) FILTER (WHERE a.outcome = 'RUNNING'), extract(epoch FROM min(a.started_at))
              FROM reliableq_attempt a JOIN reliableq_job j ON j.id = a.job_id WHERE {where}
            """,
            params,
        )
        return Outcome(
            total,
            succeeded,
            dead,
            unfinished,
            int(attempts),
            rows,
            open_rows,
            float(first_start or 0),
            float(last_finish or 0),
        )

    def latencies(self) -> list[tuple[float, float]]:
        return [
            (float(s), float(f))
            for s, f in _all(
                """
                SELECT extract(epoch FROM a.started_at - j.created_at), extract(epoch FROM j.finished_at - j.created_at)
                  FROM reliableq_job j JOIN reliableq_attempt a ON a.job_id = j.id AND a.number = 1
                 WHERE j.finished_at IS NOT NULL
                """
            )
        ]

    def start_workers(
        self,
        procs: Procs,
        *,
        processes: int,
        concurrency: int,
        tag: str,
        queue: str = QUEUE,
        args: tuple[str, ...] = (),
        **env: Any,
    ) -> None:
        for i in range(processes):
            procs.manage(
                f"{tag}-reliableq-{i}",
                ["runworker", "--queues", queue, "--concurrency", str(concurrency), "--worker-id", f"{tag}-{i}", *args],
                env=child_env(**env),
            )


# -- procrastinate -----------------------------------------------------------------------


class Procrastinate(System):
    name = "procrastinate"
    key = "procrastinate"

    def __init__(self) -> None:
        from importlib.util import find_spec

        self.available = find_spec("procrastinate") is not None

    def _task(self, job: str) -> Any:
        from . import tasks

        return {"noop": tasks.proc_noop, "sleep": tasks.proc_sleep}[job]

    def reset(self) -> None:
        _exec("TRUNCATE procrastinate_events, procrastinate_periodic_defers, procrastinate_jobs CASCADE")

    def load(self, n: int, job: str, payload: dict[str, Any] | None = None) -> None:
        task = self._task(job)
        with transaction.atomic():
            for start in range(0, n, 5000):
                task.batch_defer(*([{}] * min(5000, n - start)))

    def enqueue(self, job: str, *, atomic: bool = False) -> None:
        if atomic:  # the Django connector runs on Django's connection, so it joins the transaction
            with transaction.atomic():
                self._task(job).defer()
        else:
            self._task(job).defer()

    def enqueue_bulk(self, n: int) -> None:
        self._task("noop").batch_defer(*([{}] * n))

    def unfinished(self) -> int:
        return _one("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")[0]

    def outcome(self) -> Outcome:
        total, succeeded, dead, unfinished, attempts = _one(
            """
            SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
                   count(*) FILTER (WHERE status IN ('todo', 'doing')), coalesce(sum(greatest(attempts, 1)), 0)
              FROM procrastinate_jobs
            """
        )
        started, first_start, last_finish = _one(
            """
            SELECT count(*) FILTER (WHERE type = 'started'),
                   extract(epoch FROM min(at) FILTER (WHERE type = 'started')),
                   extract(epoch FROM max(at) FILTER (WHERE type IN ('succeeded', 'failed')))
              FROM procrastinate_events
            """
        )
        return Outcome(
            total,
            succeeded,
            dead,
            unfinished,
            int(attempts),
            started,
            0,
            float(first_start or 0),
            float(last_finish or 0),
        )

    def latencies(self) -> list[tuple[float, float]]:
        return [
            (float(s), float(f))
            for s, f in _all(
                """
                SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'started')
                                          - min(at) FILTER (WHERE type = 'deferred')),
                       extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')
                                          - min(at) FILTER (WHERE type = 'deferred'))
                  FROM procrastinate_events GROUP BY job_id
                HAVING count(*) FILTER (WHERE type = 'succeeded') > 0
                """
            )
        ]

    def start_workers(self, procs: Procs, *, processes: int, concurrency: int, tag: str, **env: Any) -> None:
        for i in range(processes):
            procs.manage(
                f"{tag}-procrastinate-{i}",
                ["procrastinate", "worker", "--queues", QUEUE, "--concurrency", str(concurrency)],
                env=child_env(**env),
            )


# -- Django tasks + django-tasks-db ------------------------------------------------------


class TasksDB(System):
    name = "django-tasks-db"
    key = "tasksdb"
    BACKEND = "dbpeer"
    MAX_PROCESSES = 16

    def __init__(self) -> None:
        from importlib.util import find_spec

        self.available = find_spec("django_tasks_db") is not None

    @property
    def table(self) -> str:
        from django_tasks_db.models import DBTaskResult

        return DBTaskResult._meta.db_table

    def _task(self, job: str) -> Any:
        from . import tasks

        return {"noop": tasks.dt_noop, "sleep": tasks.dt_sleep}[job]

    def reset(self) -> None:
        _exec(f"TRUNCATE {self.table}")

    def load(self, n: int, job: str, payload: dict[str, Any] | None = None) -> None:
        """The rows the backend's enqueue() writes, bulk-inserted (the backend has no bulk enqueue)."""
        import uuid

        from django_tasks_db.models import DBTaskResult, get_date_max

        task = self._task(job)
        with transaction.atomic():
            for start in range(0, n, 2000):
                DBTaskResult.objects.bulk_create(
                    [
                        DBTaskResult(
                            id=uuid.uuid4(),
                            args_kwargs={"args": [], "kwargs": {}},
                            priority=task.priority,
                            task_path=task.module_path,
                            queue_name=task.queue_name,
                            run_after=get_date_max(),
                            backend_name=self.BACKEND,
                        )
                        for _ in range(min(2000, n - start))
                    ]
                )

    has_bulk = False

    def enqueue(self, job: str, *, atomic: bool = False) -> None:
        if atomic:
            with transaction.atomic():
                self._task(job).enqueue()
        else:
            self._task(job).enqueue()

    def unfinished(self) -> int:
        return _one(f"SELECT count(*) FROM {self.table} WHERE status IN ('READY', 'RUNNING')")[0]

    def outcome(self) -> Outcome:
        total, succeeded, dead, unfinished, started, first_start, last_finish = _one(
            f"""
            SELECT count(*), count(*) FILTER (WHERE status = 'SUCCESSFUL'), count(*) FILTER (WHERE status = 'FAILED'),
                   count(*) FILTER (WHERE status IN ('READY', 'RUNNING')), count(started_at),
                   extract(epoch FROM min(started_at)), extract(epoch FROM max(finished_at))
              FROM {self.table}
            """
        )
        return Outcome(
            total, succeeded, dead, unfinished, started, started, 0, float(first_start or 0), float(last_finish or 0)
        )

    def latencies(self) -> list[tuple[float, float]]:
        return [
            (float(s), float(f))
            for s, f in _all(
                f"""
                SELECT extract(epoch FROM started_at - enqueued_at), extract(epoch FROM finished_at - enqueued_at)
                  FROM {self.table} WHERE finished_at IS NOT NULL
                """
            )
        ]

    def processes_for(self, processes: int, concurrency: int) -> int:
        """db_worker runs one task at a time, so matching concurrency means one process per slot (capped)."""
        return max(1, min(self.MAX_PROCESSES, processes * concurrency))

    def describe(self, processes: int, concurrency: int) -> str:
        return f"{self.processes_for(processes, concurrency)} x 1"

    def start_workers(self, procs: Procs, *, processes: int, concurrency: int, tag: str, **env: Any) -> None:
        for i in range(self.processes_for(processes, concurrency)):
            procs.manage(
                f"{tag}-tasksdb-{i}",
                [
                    "db_worker",
                    "--backend",
                    self.BACKEND,
                    "--queue-name",
                    QUEUE,
                    "--interval",
                    "0.1",
                    "--no-startup-delay",
                    "--no-reload",
                    "--worker-id",
                    f"{tag}-{i}",
                ],
                env=child_env(**env),
            )


def all_systems() -> list[System]:
    return [ReliableQ(), Procrastinate(), TasksDB()]


def timed(fn: Any) -> float:
    began = time.monotonic()
    fn()
    return time.monotonic() - began
