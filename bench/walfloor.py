"""WAL per job of the storage today, and of the designs that would write less, side by side.

    python -m bench.walfloor [--jobs 60000] [--warmup 40000] [--rounds 2] [--data-dir .pgdata/bench]

The soak measures the WAL of the real fleet (bench.scenarios.soak). This asks what a job's
lifecycle would cost in other table layouts, without building them: each layout is made in a
scratch schema of the harness's own server, and one connection runs jobs through it with the
statements of its design, in the fleet's batches (enqueue 20 per INSERT, claim and finish 16
per statement, retention 1,000 per transaction keeping the newest 30,000 finished jobs). WAL is
counted from pg_current_wal_lsn over the measured jobs, after a warm-up that brings retention to
its steady state, and split by relation and record (pg_walinspect); full-page images come after
the CHECKPOINT that starts each measurement, so they are reported apart.

The layouts:

- today: the job and attempt tables as migrated (their indexes and constraints copied with
  LIKE ... INCLUDING ALL), with the claim's, finish's and retention's statements in their shape;
- today, no listings: the same without the admin's listing indexes (created, queue, kind, the
  DEAD/CANCELLED list, the attempts' started_at);
- narrow: job history whose row no worker statement re-indexes (only immutable columns
  indexed, fillfactor 70, so claim and finish are HOT updates), a ready table (the due index) a
  claim deletes from, a lease table (token and expiry) a finish deletes from, and an attempt
  row written once, when the attempt ends;
- history in the row: the narrow layout with the claim kept out of the job's row (the lease row
  alone says a job runs) and no attempt table: the finish appends the attempt to a jsonb history
  in the job's row, one update per job (HOT while the grown row still fits its page). The
  leanest layout that still keeps the admin's lists and every attempt's record; what it would
  cost elsewhere (the history read from a document, a running job's state from the lease table,
  the attempts' own listing gone) is not measured.

The job and attempt rows carry the same columns in every layout. What a layout would give up is
said in the report, not measured here (renewals, rescues and retries are not run: no-op jobs
that succeed at once, as in the soak).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from . import core, walstats

S = "walfloor"
COLUMNS = "id, kind, queue, priority, payload, status, attempts, max_attempts, worker_id, last_error"
NEW_ROWS = (
    "SELECT uuidv7(), 'demo.noop', 'default', 0, jsonb_build_object('n', i), 'PENDING', 0, 5, '', ''"
    " FROM generate_series(1, %s) AS i"
)
LISTINGS = (
    "reliableq_job_created",
    "reliableq_job_queue_created",
    "reliableq_job_kind_created",
    "reliableq_job_settled_created",
    "reliableq_attempt_started",
)


@dataclass
class Layout:
    name: str
    create: list[str]
    enqueue: str  # %s: how many
    claim: str  # returns (id, token)
    finish: str  # %s, %s: ids, tokens
    retain: str  # %s: how many
    drop: tuple[str, ...] = ()  # indexes of the migrated tables left out of the copy


# The migrated attempt table, copied with its indexes and constraints (every layout keeps it).
ATTEMPT = [
    f"CREATE TABLE {S}.attempt (LIKE public.reliableq_attempt INCLUDING ALL)",
    f"ALTER TABLE {S}.attempt ADD FOREIGN KEY (job_id) REFERENCES {S}.job (id)"
    " ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED",
]
# The migrated tables, copied with their indexes and constraints.
COPIED = [f"CREATE TABLE {S}.job (LIKE public.reliableq_job INCLUDING ALL)", *ATTEMPT]

TODAY_CLAIM = f"""
    WITH picked AS MATERIALIZED (
        SELECT id FROM {S}.job WHERE status = 'PENDING' AND queue = 'default' AND run_at <= now()
         ORDER BY priority, run_at, id LIMIT 16 FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE {S}.job j SET status = 'RUNNING', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
               lease_expires_at = now() + interval '30 s', worker_id = 'w1', updated_at = now()
         WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
     RETURNING j.id, j.attempts, j.lease_token
    )
    INSERT INTO {S}.attempt (job_id, number, worker_id, lease_token, started_at, outcome, error)
    SELECT id, attempts, 'w1', lease_token, now(), 'RUNNING', '' FROM claimed
    RETURNING job_id, lease_token
"""
TODAY_FINISH = f"""
    WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::uuid[]) AS v(id, token)),
    fin AS (
        UPDATE {S}.job j SET status = 'SUCCEEDED', finished_at = now(), lease_token = NULL,
               lease_expires_at = NULL, updated_at = now()
          FROM v
         WHERE j.id = ANY(ARRAY(SELECT id FROM v)) AND j.status = 'RUNNING' AND j.id = v.id AND j.lease_token = v.token
     RETURNING j.id
    )
    UPDATE {S}.attempt a SET outcome = 'SUCCEEDED', finished_at = now()
     WHERE a.job_id = ANY(ARRAY(SELECT id FROM fin)) AND a.outcome = 'RUNNING'
"""
TODAY_RETAIN = f"""
    WITH batch AS MATERIALIZED (
        SELECT id FROM {S}.job WHERE status = 'SUCCEEDED' AND finished_at IS NOT NULL
         ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED
    ),
    gone AS (DELETE FROM {S}.attempt a WHERE a.job_id = ANY(ARRAY(SELECT id FROM batch)))
    DELETE FROM {S}.job j WHERE j.id = ANY(ARRAY(SELECT id FROM batch))
"""


def _today(name: str, drop: tuple[str, ...] = ()) -> Layout:
    insert = f"INSERT INTO {S}.job ({COLUMNS}) {NEW_ROWS}"
    return Layout(name, COPIED, insert, TODAY_CLAIM, TODAY_FINISH, TODAY_RETAIN, drop)


# Both ready-table layouts' claim starts so: 16 due rows taken out of the ready table.
READY_PICK = f"""WITH picked AS MATERIALIZED (
        SELECT ctid, id FROM {S}.ready WHERE queue = 'default' AND run_at <= now()
         ORDER BY priority, run_at, id LIMIT 16 FOR UPDATE SKIP LOCKED
    ),
    taken AS (DELETE FROM {S}.ready r WHERE r.ctid = ANY(ARRAY(SELECT ctid FROM picked)))"""

NARROW = Layout(
    "narrow",
    [
        f"CREATE TABLE {S}.job (LIKE public.reliableq_job INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        " WITH (fillfactor = 70)",
        f"ALTER TABLE {S}.job ADD PRIMARY KEY (id)",
        f"CREATE INDEX ON {S}.job (created_at DESC)",
        f"CREATE INDEX ON {S}.job (queue, created_at DESC)",
        f"CREATE INDEX ON {S}.job (kind, created_at DESC)",
        f"CREATE TABLE {S}.ready (id uuid NOT NULL, queue varchar(100) NOT NULL, priority int NOT NULL,"
        " run_at timestamptz NOT NULL)",
        f"CREATE INDEX ready_due ON {S}.ready (queue, priority, run_at, id)",
        f"CREATE TABLE {S}.lease (id uuid PRIMARY KEY, token uuid NOT NULL, expires_at timestamptz NOT NULL,"
        " worker_id varchar(200) NOT NULL)",
        f"CREATE INDEX lease_expiry ON {S}.lease (expires_at)",
        *ATTEMPT,
    ],
    f"""
    WITH j AS (INSERT INTO {S}.job ({COLUMNS}) {NEW_ROWS} RETURNING id, queue, priority, run_at)
    INSERT INTO {S}.ready SELECT id, queue, priority, run_at FROM j
    """,
    f"""
    {READY_PICK},
    claimed AS (
        UPDATE {S}.job j SET status = 'RUNNING', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
               worker_id = 'w1', updated_at = now()
         WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
     RETURNING j.id, j.lease_token
    )
    INSERT INTO {S}.lease SELECT id, lease_token, now() + interval '30 s', 'w1' FROM claimed
    RETURNING id, token
    """,
    f"""
    WITH gone AS (
        DELETE FROM {S}.lease l USING unnest(%s::uuid[], %s::uuid[]) AS v(id, token)
         WHERE l.id = v.id AND l.token = v.token
     RETURNING l.id, l.token
    ),
    fin AS (
        UPDATE {S}.job j SET status = 'SUCCEEDED', finished_at = now(), lease_token = NULL, updated_at = now()
          FROM gone WHERE j.id = ANY(ARRAY(SELECT id FROM gone)) AND j.id = gone.id
     RETURNING j.id, j.attempts, gone.token
    )
    INSERT INTO {S}.attempt (job_id, number, worker_id, lease_token, started_at, finished_at, outcome, error)
    SELECT id, attempts, 'w1', token, now(), now(), 'SUCCEEDED', '' FROM fin
    """,
    f"""
    WITH batch AS MATERIALIZED (
        SELECT id FROM {S}.job WHERE status = 'SUCCEEDED' ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED
    ),
    gone AS (DELETE FROM {S}.attempt a WHERE a.job_id = ANY(ARRAY(SELECT id FROM batch)))
    DELETE FROM {S}.job j WHERE j.id = ANY(ARRAY(SELECT id FROM batch))
    """,
)


HISTORY_IN_ROW = Layout(
    "history in the row",
    [
        *NARROW.create[: NARROW.create.index(ATTEMPT[0])],
        f"ALTER TABLE {S}.job ADD COLUMN history jsonb NOT NULL DEFAULT '[]'",
    ],
    NARROW.enqueue,
    f"""
    {READY_PICK}
    INSERT INTO {S}.lease SELECT id, gen_random_uuid(), now() + interval '30 s', 'w1' FROM picked
    RETURNING id, token
    """,
    f"""
    WITH gone AS (
        DELETE FROM {S}.lease l USING unnest(%s::uuid[], %s::uuid[]) AS v(id, token)
         WHERE l.id = v.id AND l.token = v.token
     RETURNING l.id, l.token, l.expires_at, l.worker_id
    )
    UPDATE {S}.job j SET status = 'SUCCEEDED', attempts = j.attempts + 1, finished_at = now(), updated_at = now(),
           history = j.history || jsonb_build_array(jsonb_build_object(
               'number', j.attempts + 1, 'worker', gone.worker_id, 'token', gone.token,
               'started', gone.expires_at - interval '30 s', 'finished', now(), 'outcome', 'SUCCEEDED', 'error', ''))
      FROM gone WHERE j.id = ANY(ARRAY(SELECT id FROM gone)) AND j.id = gone.id
    """,
    f"""
    WITH batch AS MATERIALIZED (
        SELECT id FROM {S}.job WHERE status = 'SUCCEEDED' ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED
    )
    DELETE FROM {S}.job j WHERE j.id = ANY(ARRAY(SELECT id FROM batch))
    """,
)


def layouts() -> list[Layout]:
    return [_today("today"), _today("today, no listings", LISTINGS), NARROW, HISTORY_IN_ROW]


def _create(conn: psycopg.Connection[Any], layout: Layout) -> None:
    conn.execute(f"DROP SCHEMA IF EXISTS {S} CASCADE")
    conn.execute(f"CREATE SCHEMA {S}")
    for statement in layout.create:
        conn.execute(statement)
    # LIKE names the copies after their columns; find each by its original's definition.
    for name in layout.drop:
        (definition,) = conn.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = %s::regclass", [f"public.{name}"]
        ).fetchone()  # type: ignore[misc]
        shape = definition.split(" USING ", 1)[1]
        table = "attempt" if "attempt" in name else "job"
        for (copy,) in conn.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass",
            [f"{S}.{table}"],
        ).fetchall():
            (copied,) = conn.execute("SELECT pg_get_indexdef(%s::regclass)", [copy]).fetchone()  # type: ignore[misc]
            if copied.split(" USING ", 1)[1] == shape:
                conn.execute(f"DROP INDEX {copy}")


def _run(conn: psycopg.Connection[Any], layout: Layout, jobs: int) -> None:
    """`jobs` jobs through enqueue, claim and finish, with retention keeping 30,000 finished."""
    done = deleted = 0
    while done < jobs:
        conn.execute(layout.enqueue, [20])
        for _ in range(2):
            with conn.transaction():
                taken = conn.execute(layout.claim).fetchall()
            if not taken:
                continue
            with conn.transaction():
                conn.execute(layout.finish, [[r[0] for r in taken], [r[1] for r in taken]])
            done += len(taken)
        if done - deleted >= 31_000:
            with conn.transaction():
                deleted += conn.execute(layout.retain, [1000]).rowcount


def measure(url: str, layout: Layout, *, jobs: int, warmup: int, say: Callable[[str], None]) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        _create(conn, layout)
        _run(conn, layout, warmup)
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
        (start,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()  # type: ignore[misc]
        _run(conn, layout, jobs)
        (end,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()  # type: ignore[misc]
        (total,) = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", [end, start]).fetchone()  # type: ignore[misc]
    parts = walstats.breakdown(url, start, end) or []
    fpi = sum(p.fpi_bytes for p in parts)
    result = {
        "layout": layout.name,
        "bytes_per_job": float(total) / jobs,
        "without_full_pages": (float(total) - fpi) / jobs,
        "relations": walstats.grouped(parts),
        "parts": parts,
    }
    per_job, lean = result["bytes_per_job"], result["without_full_pages"]
    say(f"  {layout.name}: {per_job:,.0f} bytes/job ({lean:,.0f} without full-page images)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--warmup", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=core.DATA_DIR, help="the harness's own PostgreSQL data dir")
    args = parser.parse_args(argv)
    progress = core.Progress()
    url = core.start_server(args.data_dir)
    core.prepare_environment(url)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)  # the tables whose layout "today" copies
    results = []
    for n in range(args.rounds):
        progress.say(f"round {n + 1} of {args.rounds}: {args.warmup:,} jobs to warm up, then {args.jobs:,} measured")
        for layout in layouts():
            results.append(measure(url, layout, jobs=args.jobs, warmup=args.warmup, say=progress.say))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {S} CASCADE")
    print("\n| layout | WAL bytes per job | without full-page images |\n| --- | ---: | ---: |")
    for r in results:
        print(f"| {r['layout']} | {r['bytes_per_job']:,.0f} | {r['without_full_pages']:,.0f} |")
    for r in results[-len(layouts()) :]:
        print(f"\n{r['layout']}, by relation (bytes per job, of which full pages):\n")
        for name, records, size, fpi in r["relations"]:
            n = args.jobs
            print(f"- {name}: {records / n:.2f} records, {(size + fpi) / n:,.0f} bytes ({fpi / n:,.0f} full pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
