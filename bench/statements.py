"""What the database ran, by duty, from pg_stat_statements: the fleet scenario's measure of maintenance.

Why pg_stat_statements: it counts what PostgreSQL executed, from every process of the fleet,
leader or not, whatever a worker believes it did; a counter in the leader would count only the
leader, and a statement log costs a write per statement and parsing afterwards. The harness's
embedded server loads it (shared_preload_libraries, bench.core.start_server) with tracking off,
so the other scenarios pay nothing; `tracking()` turns it on for the fleet's windows.

Each duty is recognized by text only its statements carry (normalized: constants become $n):

- rescue: leases' statement that closes expired leases (`WITH expired AS MATERIALIZED`);
- cron: the schedules' statements (reliableq.queue.schedules: the round's look for the earliest slot,
  and the lock and update of due schedules when some are), by their table's name; not the jobs they make;
- retention: prune's `WITH batch AS MATERIALIZED` ... `DELETE FROM reliableq_attempt`, once per status;
- plan guard: planguard's statistics check (`pg_relation_size(c.oid)`), before rescues and retention;
- lease tries: the `INSERT INTO reliableq_leader` every worker sends every third of LEASE_SECONDS,
  to keep the lease or take it over. The one per-worker cost of the election, so it grows with the fleet.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

DUTIES: dict[str, str] = {
    "rescue": "query LIKE '%WITH expired AS MATERIALIZED%'",
    "cron": "query LIKE '%reliableq_schedule%'",
    "retention": "query LIKE '%WITH batch AS MATERIALIZED%' AND query LIKE '%DELETE FROM reliableq_attempt%'",
    "plan guard": "query LIKE '%pg_relation_size(c.oid)%'",
    "lease tries": "query LIKE '%INSERT INTO reliableq_leader%'",
}
MAINTENANCE = ("rescue", "cron", "retention", "plan guard")  # what the elected leader alone sends


def enable(conn: psycopg.Connection[Any]) -> bool:
    """Make the server load pg_stat_statements with tracking off; True if it must restart to load it."""
    (libraries,) = conn.execute("SHOW shared_preload_libraries").fetchone()  # type: ignore[misc]
    if "pg_stat_statements" in libraries:
        return False
    loaded = ", ".join(x for x in [libraries.strip(), "pg_stat_statements"] if x)
    conn.execute(f"ALTER SYSTEM SET shared_preload_libraries = '{loaded}'")
    return True


def install(conn: psycopg.Connection[Any]) -> None:
    """Create the extension in the connected database (loaded already), tracking nothing until asked."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'none'")
    conn.execute("SELECT pg_reload_conf()")


@contextmanager
def tracking(url: str) -> Iterator[None]:
    """Track top-level statements of every session while the block runs (sessions started in it see it)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'top'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'none'")
            conn.execute("SELECT pg_reload_conf()")


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def calls(url: str) -> dict[str, int]:
    """Calls of each duty's statements since the last reset, in the connected database."""
    columns = ", ".join(f"coalesce(sum(calls) FILTER (WHERE {condition}), 0)" for condition in DUTIES.values())
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT {columns} FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())"
        ).fetchone()
    assert row is not None
    return {duty: int(n) for duty, n in zip(DUTIES, row, strict=True)}


# The worker's two hot statements, by text only each carries.
HOT = {
    "claims": "(query LIKE '%picked AS MATERIALIZED%' OR query LIKE '%UPDATE reliableq_job j SET status = %RUNNING%')",
    "finishes": "query LIKE '%fin AS (%UPDATE reliableq_job j%'",
}


def hot_cost(url: str) -> dict[str, tuple[int, float, float]]:
    """Since the last reset, for claims and finishes: (calls, mean ms, shared buffers touched per call)."""
    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name, condition in HOT.items():
            row = conn.execute(
                "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time) / nullif(sum(calls), 0), 0),"
                " coalesce(sum(shared_blks_hit + shared_blks_read)::float / nullif(sum(calls), 0), 0)"
                f" FROM pg_stat_statements WHERE {condition} AND dbid = (SELECT oid FROM pg_database"
                " WHERE datname = current_database())"
            ).fetchone()
            assert row is not None
            out[name] = (int(row[0]), float(row[1]), float(row[2]))
    return out
