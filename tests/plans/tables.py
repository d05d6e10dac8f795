"""The job tables in the statistics states that make plans flip, built with INSERT ... SELECT generate_series.

A state is what the planner believes (the statistics) next to what is really there (the rows).
Autovacuum is switched off for the three tables while a state is in use, so that it cannot
analyze behind the test's back, and switched back on afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connection, transaction

from reliableq.models import Attempt, Job, ReturnValue
from testproject import dburl

JOB = Job._meta.db_table
ATTEMPT = Attempt._meta.db_table
RETURN_VALUE = ReturnValue._meta.db_table
TABLES = (JOB, ATTEMPT, RETURN_VALUE)

KIND = "demo.noop"  # registered by testproject, so services.submit accepts it
CAPPED = "plans.capped"  # a kind with a max_running cap (or other limits): every tenth job, with one of 100 keys
QUEUES = ("default", "reports")  # every fourth job is in "reports"
WORKERS = 8  # RUNNING rows belong to workers w-0 .. w-7


@dataclass(frozen=True, slots=True, kw_only=True)
class Mix:
    """How many jobs of each kind of row to add."""

    due: int = 0  # PENDING, run_at passed
    scheduled: int = 0  # PENDING, run_at an hour ahead
    running: int = 0  # RUNNING under a live lease, with the open attempt
    expired: int = 0  # RUNNING, lease ran out (a tenth of them on their last attempt), open attempt
    succeeded: int = 0  # finished two days ago (prunable), one attempt each
    dead: int = 0  # finished two days ago, one attempt each

    def __mul__(self, factor: float) -> Mix:
        return Mix(**{name: round(getattr(self, name) * factor) for name in self.__slots__})

    @property
    def total(self) -> int:
        return sum(getattr(self, name) for name in self.__slots__)


# A working set: a backlog, a fleet's worth of RUNNING rows, some dead leases and history.
WORKING_SET = Mix(due=30_000, scheduled=2_000, running=700, expired=300, succeeded=15_000, dead=2_000)


def _exec(sql: str, params: Sequence[Any] = ()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


# The columns that differ by kind of row, as SQL over g (1..count).
ROWS = {
    "succeeded": dict(
        status="'SUCCEEDED'",
        attempts="1",
        worker_id="'w-' || (g %% 8)",
        run_at="now() - interval '2 days'",
        finished_at="now() - interval '2 days' - g * interval '1 ms'",
    ),
    "dead": dict(
        status="'DEAD'",
        attempts="5",
        worker_id="'w-' || (g %% 8)",
        run_at="now() - interval '2 days'",
        finished_at="now() - interval '2 days' - g * interval '1 ms'",
    ),
    "running": dict(
        status="'RUNNING'",
        attempts="1",
        worker_id="'w-' || (g %% 8)",
        run_at="now() - interval '1 minute'",
        lease_token="gen_random_uuid()",
        lease_expires_at="now() + interval '5 minutes' + g * interval '1 ms'",
    ),
    "expired": dict(
        status="'RUNNING'",
        attempts="CASE WHEN g %% 10 = 0 THEN 5 ELSE 1 END",
        worker_id="'w-gone'",
        run_at="now() - interval '1 hour'",
        lease_token="gen_random_uuid()",
        lease_expires_at="now() - interval '10 minutes' + g * interval '1 ms'",
    ),
    "due": dict(status="'PENDING'", run_at="now() - interval '1 hour' + g * interval '1 ms'"),
    "scheduled": dict(status="'PENDING'", run_at="now() + interval '1 hour' + g * interval '1 ms'"),
}
DEFAULTS = dict(attempts="0", worker_id="''", lease_token="NULL", lease_expires_at="NULL", finished_at="NULL")


def _jobs(count: int, columns: dict[str, str]) -> None:
    """Insert `count` jobs of one kind of row (see ROWS)."""
    if count <= 0:
        return
    c = {**DEFAULTS, **columns}
    _exec(
        f"""
        INSERT INTO {JOB} (id, kind, queue, priority, payload, max_attempts, last_error, dedupe_scope,
                           created_at, updated_at, status, attempts, worker_id, run_at, lease_token,
                           lease_expires_at, finished_at, concurrency_key)
        SELECT gen_random_uuid(),
               CASE WHEN g %% 10 = 0 THEN %s ELSE %s END,
               CASE WHEN g %% 4 = 0 THEN %s ELSE %s END,
               (g %% 5 = 0)::int, jsonb_build_object('n', g), 5, '', '',
               now() - interval '3 days' + g * interval '1 ms', now(),
               {c["status"]}, {c["attempts"]}, {c["worker_id"]}, {c["run_at"]}, {c["lease_token"]},
               {c["lease_expires_at"]}, {c["finished_at"]},
               CASE WHEN g %% 10 = 0 THEN 'k' || (g %% 1000) END
          FROM generate_series(1, %s) g
        """,
        [CAPPED, KIND, QUEUES[1], QUEUES[0], count],
    )


def _attempts(status: str, outcome: str) -> None:
    """Give every job of `status` that has no attempt yet its latest one.

    The loader runs under whatever statistics the state left (never analyzed, analyzed empty...),
    and must not change them; with the attempt table's rows unknown to the planner, the NOT
    EXISTS became a nested loop that read the attempt table once per job (minutes at 1M jobs).
    So nested loops are off for this statement alone.
    """
    _exec("SET enable_nestloop = off")
    try:
        _insert_attempts(status, outcome)
    finally:
        _exec("RESET enable_nestloop")


def _insert_attempts(status: str, outcome: str) -> None:
    _exec(
        f"""
        INSERT INTO {ATTEMPT} (job_id, number, worker_id, lease_token, started_at, finished_at, outcome, error)
        SELECT j.id, j.attempts, j.worker_id, coalesce(j.lease_token, gen_random_uuid()),
               coalesce(j.finished_at, now()) - interval '1 second', j.finished_at, %s, ''
          FROM {JOB} j
         WHERE j.status = %s AND j.attempts > 0
           AND NOT EXISTS (SELECT FROM {ATTEMPT} a WHERE a.job_id = j.id)
        """,
        [outcome, status],
    )


def load(mix: Mix) -> None:
    """Add the rows of `mix`: finished history first, then the live rows, as a queue's table fills."""
    for name in ("succeeded", "dead", "running", "expired", "due", "scheduled"):
        _jobs(getattr(mix, name), ROWS[name])
    _attempts("RUNNING", "RUNNING")
    _attempts("SUCCEEDED", "SUCCEEDED")
    _attempts("DEAD", "FAILED_PERMANENT")


def truncate() -> None:
    _exec(f"TRUNCATE {', '.join(TABLES)}, reliableq_batchkey, reliableq_step")


def analyze() -> None:
    for table in TABLES:
        _exec(f"ANALYZE {table}")


def forget_statistics() -> None:
    """Make the tables look never analyzed: no column statistics, no row count (needs a superuser)."""
    _exec("DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [list(TABLES)])
    _exec(
        "UPDATE pg_class SET reltuples = -1, relpages = 0, relallvisible = 0 WHERE oid = ANY(%s::regclass[])",
        [list(TABLES)],
    )


def analyze_elsewhere() -> None:
    """ANALYZE from another connection: it sees only what this one has committed (as autovacuum would)."""
    with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True) as other:
        for table in TABLES:
            other.execute(f"ANALYZE {table}")


# The statistics states. Each empties the tables and leaves `mix` loaded under statistics that
# describe something else (or nothing).


def never_analyzed(mix: Mix) -> None:
    """A fresh deployment: no statistics at all."""
    truncate()
    forget_statistics()
    load(mix)


def analyzed_empty(mix: Mix) -> None:
    """Analyzed while empty (right after a TRUNCATE), then loaded."""
    truncate()
    analyze()
    load(mix)


def analyzed_small(mix: Mix) -> None:
    """Analyzed at a few hundred rows of the same kinds, then loaded."""
    truncate()
    load(mix * (300 / mix.total))
    analyze()
    load(mix)


def analyzed_mid_load(mix: Mix) -> None:
    """Analyzed while the bulk load was in flight: one committed row in the pages of all of them.

    What autovacuum saw in the benchmark: the statistics say the table holds one row, yet its
    pages hold thousands. The planner scales the row count by the pages it has now, which
    stays one, so every index looks like a single lookup, a walk over all of it included.
    """
    truncate()
    load(Mix(due=1))
    with transaction.atomic():
        load(mix)
        analyze_elsewhere()


def pile_up(finished: int = 1_000_000) -> Callable[[Mix], None]:
    """`finished` old jobs, analyzed (everything looks finished), then `mix` arrives."""

    def state(mix: Mix) -> None:
        truncate()
        load(Mix(succeeded=finished))
        analyze()
        load(mix)

    return state


@contextmanager
def autovacuum_off() -> Iterator[None]:
    """Keep autovacuum (and so auto-analyze) away from the tables; put their settings back afterwards."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reloptions FROM pg_class WHERE oid = ANY(%s::regclass[])", [list(TABLES)])
        before = dict(cursor.fetchall())
    for table in TABLES:
        _exec(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    try:
        yield
    finally:
        for table in TABLES:
            options = [o for o in before.get(table) or [] if o.startswith("autovacuum_enabled=")]
            if options:
                _exec(f"ALTER TABLE {table} SET ({options[0]})")
            else:
                _exec(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
