"""The INSERTs that make jobs: one job, a batch (each bounded by the submitter's unfinished jobs when
a user submits), many of one kind; and the wake-up of a queue's idle workers on commit.

The rules (what a valid job is, budgets, keys) are the caller's (reliableq.services); these
statements only store what they are given, with time from the database.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..models import Job
from . import db
from .fairness import Turn, first_turn_params, first_turn_sql
from .sql import JOB, S

CHANNEL = "reliableq"


# The payload is the queue; run_at in the future needs no wake-up now (workers poll).
def notify_sql(row: str) -> str:
    """SQL: wake the idle workers of the queue of `row` (a CTE's name) if its job is due, on commit."""
    return f"CASE WHEN {row}.run_at <= now() THEN pg_notify('{CHANNEL}', {row}.queue) END"


_NOTIFY_INSERTED = notify_sql("inserted")  # a fragment, not a statement: not listed

_INSERT_COLUMNS = """id, kind, queue, priority, payload, status, attempts, max_attempts, run_at, worker_id,
                   last_error, dedupe_key, dedupe_scope, submitted_by, concurrency_key, unique_key,
                   trace_context, created_at, updated_at, fair_key, fair_seq"""


def _turn(keyed: bool | None) -> str:
    """A job's fair_seq: NULL for a kind that is not fair (`keyed` None), else its turn (fairness)."""
    return "NULL" if keyed is None else first_turn_sql(keyed=keyed)


def _give_way(keys: bool) -> str:
    """An INSERT's conflict clause: a job with a dedupe_key or a unique_key may meet another's, and
    ON CONFLICT DO NOTHING leaves it out. A job with neither cannot (its id is new), and a plain
    INSERT spares it the speculative insertion ON CONFLICT makes: the arbiter indexes probed first,
    and one more WAL record to confirm the row."""
    return "ON CONFLICT DO NOTHING" if keys else ""


@functools.cache
def _submit_sql(keyed: bool | None, *, keys: bool = True) -> str:
    return f"""
    WITH inserted AS (
        INSERT INTO {JOB} ({_INSERT_COLUMNS})
        VALUES (%s, %s, %s, %s, %s::jsonb, {S.PENDING}, 0, %s, GREATEST(COALESCE(%s, now()), now()),
                '', '', %s, %s, %s, %s, %s, %s::jsonb, now(), now(), %s, {_turn(keyed)})
        {_give_way(keys)}
        RETURNING run_at, created_at, updated_at, queue
    )
    -- Wakes idle workers of this queue when (and only if) the transaction commits.
    SELECT run_at, created_at, updated_at, {_NOTIFY_INSERTED} FROM inserted
"""


# The job a debounced enqueue leaves PENDING: a new one due in S seconds, or the key's PENDING job
# with the new payload and run_at moved to S seconds from now (never past M seconds after its first
# enqueue, its created_at). One statement, so concurrent enqueues of one key serialize on the row's
# lock and the last to commit leaves its payload. A RUNNING holder is fenced out by the WHERE: no
# row comes back and the caller returns that job, as a plain unique_key would.
@functools.cache
def _debounce_sql(keyed: bool | None) -> str:
    delay = "make_interval(secs => %s::float8)"
    return f"""
    WITH upserted AS (
        INSERT INTO {JOB} AS job ({_INSERT_COLUMNS})
        VALUES (%s, %s, %s, %s, %s::jsonb, {S.PENDING}, 0, %s, now() + {delay},
                '', '', %s, %s, %s, %s, %s, %s::jsonb, now(), now(), %s, {_turn(keyed)})
        ON CONFLICT (kind, dedupe_scope, unique_key)
                    WHERE unique_key IS NOT NULL AND status IN ({S.PENDING}, {S.RUNNING})
        DO UPDATE SET payload = EXCLUDED.payload, updated_at = now(),
                      run_at = GREATEST(now(), LEAST(now() + {delay}, job.created_at + {delay}))
         WHERE job.status = {S.PENDING}
        RETURNING (xmax = 0) AS inserted, {", ".join(f"job.{f.column}" for f in _FIELDS)}
    )
    SELECT upserted.*, {notify_sql("upserted")} FROM upserted
"""


# The job's row as the debounce returns it: every concrete field, so that no read follows the write.
_FIELDS = [f for f in Job._meta.concrete_fields]
_ATTNAMES = [f.attname for f in _FIELDS]


def _job(row: Sequence[Any]) -> Job:
    """A Job from its row's values, converted as a QuerySet converts them (the JSON fields' text)."""
    conn = db.connection()
    values = []
    for f, value in zip(_FIELDS, row, strict=True):
        for convert in f.get_db_converters(conn):
            value = convert(value, f, conn)
        values.append(value)
    job: Job = Job.from_db(db.alias(), _ATTNAMES, values)
    return job


# The submitter's unfinished jobs, counted up to the bound through reliableq_job_submitter_open (its
# predicate written out, so that the planner can use the partial index).
HELD_SQL = f"""
    SELECT count(*) AS n FROM (
        SELECT 1 FROM {JOB}
         WHERE dedupe_scope = %s AND dedupe_scope <> '' AND status IN ({S.WAITING}, {S.PENDING}, {S.RUNNING})
         LIMIT %s
    ) held
"""


# The same INSERT, made only while the submitter holds fewer unfinished jobs than its bound. One
# statement: no round trip more than an unbounded submission. Concurrent submissions of one user
# each count in their own snapshot, so the bound can be passed by the requests in flight at once.
@functools.cache
def _bounded_submit_sql(keyed: bool | None, *, keys: bool = True) -> str:
    return f"""
    WITH held AS MATERIALIZED ({HELD_SQL}),
    inserted AS (
        INSERT INTO {JOB} ({_INSERT_COLUMNS})
        SELECT %s::uuid, %s, %s, %s::int, %s::jsonb, {S.PENDING}, 0, %s::int,
               GREATEST(COALESCE(%s::timestamptz, now()), now()), '', '', %s, %s, %s, %s, %s, %s::jsonb, now(), now(),
               %s, {_turn(keyed)}
         WHERE (SELECT n FROM held) < %s
        {_give_way(keys)}
        RETURNING run_at, created_at, updated_at, queue
    )
    SELECT inserted.run_at, inserted.created_at, inserted.updated_at, {_NOTIFY_INSERTED}, (SELECT n FROM held)
      FROM (SELECT 1) AS one LEFT JOIN inserted ON true
"""


_GROUP_FIRST = first_turn_sql(
    keyed=None, queue="g.queue", kind="g.kind", priority="g.priority", key="g.fair_key", stride="g.stride"
)


# One row comes back, not one per job: the transaction's time (every job's created_at, and the
# run_at of every job due now), the run_at of the few scheduled later, and (bounded) the count the
# bound was checked against. The first job carries the batch's Idempotency-Key, if any.
@functools.cache
def _submit_many_sql(bounded: bool, keys: bool) -> str:
    """The batch INSERT, counting the submitter's unfinished jobs if `bounded`; ON CONFLICT only for a
    batch with an Idempotency-Key (`keys`), whose first job carries it (_give_way).

    A fair kind's jobs take their key's next turns, one stride apart: the first turn is read once
    per (queue, kind, priority, key) of the batch (`turns`), not once per job.
    """
    held = HELD_SQL if bounded else "SELECT 0 AS n"
    return f"""
    WITH held AS MATERIALIZED ({held}),
    new AS MATERIALIZED (
        SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::int[], %s::text[], %s::int[],
                             %s::timestamptz[], %s::text[], %s::text[], %s::float8[]) WITH ORDINALITY
                      AS n(id, kind, queue, priority, payload, budget, run_at, key, fair_key, stride, ord)
    ),
    turns AS MATERIALIZED (
        SELECT g.queue, g.kind, g.priority, g.fair_key, {_GROUP_FIRST} AS first
          FROM (SELECT DISTINCT queue, kind, priority, fair_key, stride FROM new WHERE stride IS NOT NULL) g
    ),
    inserted AS (
        INSERT INTO {JOB} (id, kind, queue, priority, payload, status, attempts, max_attempts,
                           run_at, worker_id, last_error, dedupe_key, dedupe_scope, submitted_by, concurrency_key,
                           trace_context, created_at, updated_at, fair_key, fair_seq)
        SELECT n.id, n.kind, n.queue, n.priority, n.payload::jsonb, {S.PENDING}, 0, n.budget,
               GREATEST(COALESCE(n.run_at, now()), now()), '', '',
               CASE WHEN n.ord = 1 THEN %s END, %s, %s, n.key, %s::jsonb, now(), now(), n.fair_key,
               t.first + n.stride * (row_number() OVER (
                   PARTITION BY n.queue, n.kind, n.priority, n.fair_key, n.stride IS NULL ORDER BY n.ord) - 1)
          FROM new n
          LEFT JOIN turns t ON n.stride IS NOT NULL AND t.queue = n.queue AND t.kind = n.kind
                           AND t.priority = n.priority AND t.fair_key IS NOT DISTINCT FROM n.fair_key
         WHERE (SELECT held.n FROM held) + %s <= %s
        {_give_way(keys)}
        RETURNING id, run_at, queue
    ),
    woken AS (
        SELECT pg_notify('{CHANNEL}', queue) FROM (SELECT DISTINCT queue FROM inserted WHERE run_at <= now()) q
    )
    SELECT now(), count(*), array_agg(id) FILTER (WHERE run_at <> now()),
           array_agg(run_at) FILTER (WHERE run_at <> now()), (SELECT count(*) FROM woken), (SELECT held.n FROM held)
      FROM inserted
"""


def insert_one(
    params: Sequence[Any], *, scope: str, bound: int | None, keys: bool = True, turn: Turn | None = None
) -> tuple[Any, int | None]:
    """INSERT one job (`params`: its id, then the columns submit() gives; `keys`: whether it has a
    dedupe_key or a unique_key; `turn` for a fair kind). Returns (run_at, created_at, updated_at,
    notified) or None when a key's conflict left it out, and, bounded, the count of the submitter's
    unfinished jobs it checked (None unbounded)."""
    keyed = None if turn is None else turn.key is not None
    if turn is None:
        fair: list[Any] = [None]
    else:
        _, kind, queue, priority = params[:4]
        fair = [turn.key, *first_turn_params(queue, kind, priority, turn)]
    if bound is None:
        # Prepared once per connection, as the worker's statements are: the call every view makes.
        rows = db.fetch(_submit_sql(keyed, keys=keys), [*params, *fair])
        return (rows[0] if rows else None), None
    with db.cursor() as cursor:
        cursor.execute(_bounded_submit_sql(keyed, keys=keys), [scope, bound, *params, *fair, bound])
        *row, held = cursor.fetchone()
        return (None if row[0] is None else row), held


def debounce_one(
    params: Sequence[Any], *, seconds: float, max_seconds: float | None, turn: Turn | None = None
) -> tuple[bool, Job] | None:
    """INSERT one job (`params` as insert_one takes them, with run_at None) due in `seconds`, or debounce
    the key's PENDING job (its payload replaced, its run_at moved; see _debounce_sql). Returns (whether
    it was inserted, the job as stored), or None when the key's job is RUNNING."""
    keyed = None if turn is None else turn.key is not None
    fair: list[Any] = [None]
    if turn is not None:
        _, kind, queue, priority = params[:4]
        fair = [turn.key, *first_turn_params(queue, kind, priority, turn)]
    # run_at (params[6]) is the debounce's: refused beside it by the rules, replaced here by the delay.
    values = [*params[:6], seconds, *params[7:], *fair]
    with db.cursor() as cursor:
        # Without debounce_max the cap is NULL, which LEAST ignores.
        cursor.execute(_debounce_sql(keyed), [*values, seconds, max_seconds])
        row = cursor.fetchone()
    return None if row is None else (bool(row[0]), _job(row[1:-1]))


def insert_many(columns: Sequence[Any], *, count: int, scope: str, bound: int | None) -> tuple[Any, ...]:
    """INSERT a batch (`columns` as submit_many gives them) in one statement: (now, stored, ids and run_ats
    of the jobs scheduled later, queues woken, the unfinished jobs counted)."""
    # submit_many gives the batch's own values (key, scope, submitter, trace context), its ten arrays,
    # then its size; the statement reads the arrays first.
    keys = columns[0] is not None
    columns = [*columns[4:14], *columns[:4], *columns[14:]]
    with db.cursor() as cursor:
        if bound is None:
            cursor.execute(_submit_many_sql(False, keys), [*columns, count])
        else:
            cursor.execute(_submit_many_sql(True, keys), [scope, bound, *columns, bound])
        return tuple(cursor.fetchone())


@functools.cache
def _of_kind_sql(keyed: bool | None) -> str:
    """insert_of_kind's INSERT: a fair kind's jobs (`keyed` not None) take their key's next turns."""
    seq = "NULL::float8" if keyed is None else f"{first_turn_sql(keyed=keyed)} + %s * (new.ord - 1)"
    return f"""
            WITH inserted AS (
                INSERT INTO {JOB} (id, kind, queue, priority, payload, status, attempts, max_attempts, run_at,
                                   worker_id, last_error, concurrency_key, trace_context, created_at, updated_at,
                                   fair_key, fair_seq)
                SELECT new.id, %s, %s, %s, new.payload::jsonb, {S.PENDING}, 0, %s,
                       GREATEST(COALESCE(%s, now()), now()), '', '', %s, %s::jsonb, now(), now(), %s, {seq}
                  FROM unnest(%s::uuid[], %s::text[]) WITH ORDINALITY AS new(id, payload, ord)
                RETURNING run_at, queue
            )
            -- One wake-up for the queue, delivered when (and only if) the transaction commits.
            SELECT count(*), CASE WHEN bool_or(run_at <= now()) THEN pg_notify('{CHANNEL}', %s) END FROM inserted
            """


def insert_of_kind(
    *,
    kind: str,
    queue: str,
    priority: int,
    budget: int,
    concurrency_key: str | None = None,
    run_at: Any,
    trace_context: str | None,
    ids: Sequence[Any],
    payloads: Sequence[str],
    turn: Turn | None = None,
) -> int:
    """INSERT many jobs of one kind in one statement, with one wake-up of the queue; return how many.
    With `turn` (a fair kind), the jobs take their key's next turns, one stride apart."""
    fair: list[Any] = [None]
    keyed = None if turn is None else turn.key is not None
    if turn is not None:
        fair = [turn.key, *first_turn_params(queue, kind, priority, turn), turn.stride]
    with db.cursor() as cursor:
        cursor.execute(
            _of_kind_sql(keyed),
            (kind, queue, priority, budget, run_at, concurrency_key, trace_context, *fair, list(ids), list(payloads),
             queue),
        )  # fmt: skip
        (count, _) = cursor.fetchone()
    return int(count)


NOTIFY_QUEUE_SQL = "SELECT pg_notify(%s, %s)"


def notify(queue: str) -> None:
    """Wake the queue's idle workers once this transaction commits."""
    with db.cursor() as cursor:
        cursor.execute(NOTIFY_QUEUE_SQL, [CHANNEL, queue])
