"""Two ceilings for enqueue: the row `reliableq.enqueue` stores, inserted and committed without the
queue's API, in the same run as each system's enqueue (bench/scenarios/ingestion.py, bench.enqueuecost).

- bare psycopg: one INSERT of the job's columns on a psycopg connection of its own, no Django; an
  `atomic` call is BEGIN, INSERT, COMMIT; bulk is one INSERT from unnest() in one transaction;
- Django `create`: `Job.objects.create(...)` (its database defaults, RETURNING them), the same inside
  `transaction.atomic()`, and `bulk_create` in one for bulk.

Both write to reliableq_job, so ReliableQ's reset and outcome count them.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection, transaction

from .systems import QUEUE, ReliableQ

_COLUMNS = (
    "id, kind, queue, priority, payload, status, attempts, max_attempts, run_at, worker_id, last_error, "
    "created_at, updated_at"
)
_ONE = f"""
    INSERT INTO reliableq_job ({_COLUMNS})
    VALUES (%s, %s, %s, 0, '{{}}'::jsonb, 'PENDING', 0, %s, now(), '', '', now(), now())
"""
_MANY = f"""
    INSERT INTO reliableq_job ({_COLUMNS})
    SELECT id, %s, %s, 0, '{{}}'::jsonb, 'PENDING', 0, %s, now(), '', '', now(), now() FROM unnest(%s::uuid[]) AS id
"""


@functools.cache  # once: a plain INSERT knows its values, it asks no registry
def _budget(kind: str) -> int:
    from reliableq import services

    return services.default_max_attempts(kind)


class BarePsycopg(ReliableQ):
    """The same row by bare psycopg (a connection of its own, autocommit): the database's and driver's floor."""

    name = "bare psycopg INSERT"
    key = "psycopg"

    def __init__(self) -> None:
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            import psycopg

            params = connection.get_connection_params()
            params.pop("cursor_factory", None)
            params.pop("context", None)
            self._conn = psycopg.connect(**params, autocommit=True)
        return self._conn

    def enqueue(self, job: str, *, atomic: bool = False, queue: str = QUEUE) -> None:
        from reliableq.ids import job_id

        kind = self.KINDS[job]
        conn = self._connection()
        if atomic:
            with conn.transaction():
                conn.execute(_ONE, [job_id(), kind, queue, _budget(kind)])
        else:
            conn.execute(_ONE, [job_id(), kind, queue, _budget(kind)])

    def enqueue_bulk(
        self, n: int, job: str = "noop", payload: dict[str, Any] | None = None, *, queue: str = QUEUE
    ) -> None:
        from reliableq.ids import job_id

        kind = self.KINDS.get(job, job)
        conn = self._connection()
        with conn.transaction():
            conn.execute(_MANY, [kind, queue, _budget(kind), [job_id() for _ in range(n)]])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


class DjangoCreate(ReliableQ):
    """The same row by a plain Django `Job.objects.create` (`bulk_create` for bulk): the ORM's floor."""

    name = "Django create"
    key = "django"

    def enqueue(self, job: str, *, atomic: bool = False, queue: str = QUEUE) -> None:
        from reliableq.models import Job

        kind = self.KINDS[job]
        if atomic:
            with transaction.atomic():
                Job.objects.create(kind=kind, queue=queue, max_attempts=_budget(kind))
        else:
            Job.objects.create(kind=kind, queue=queue, max_attempts=_budget(kind))

    def enqueue_bulk(
        self, n: int, job: str = "noop", payload: dict[str, Any] | None = None, *, queue: str = QUEUE
    ) -> None:
        from reliableq.models import Job

        kind = self.KINDS.get(job, job)
        budget = _budget(kind)
        with transaction.atomic():
            Job.objects.bulk_create([Job(kind=kind, queue=queue, max_attempts=budget) for _ in range(n)])

    def close(self) -> None:
        """Nothing of its own to close: it runs on Django's connection."""


def ceilings() -> list[BarePsycopg | DjangoCreate]:
    return [BarePsycopg(), DjangoCreate()]
