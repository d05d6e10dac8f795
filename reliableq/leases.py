"""Every write that can change who owns a job: claim, renew, finish, and marking a lease lost.

Each statement that acts for an owner is fenced with ``status = 'RUNNING' AND lease_token = <token>``:
a worker whose lease was taken back updates zero rows and so changes nothing. Time always
comes from the database (``now()``), never from a worker's clock.

Plans that no statistics can spoil. Right after a TRUNCATE and a bulk load the statistics can
say a table holds one row while it holds thousands; the planner then costs a walk over a whole
index like a single lookup, and a join to the table can become a nested loop over that index
for each row on the other side (the rescue once ran for minutes that way). So:

- a write finds its job rows with ``j.id = ANY(...)`` on the table itself, never through a join
  alone: the primary key is then the one index that fits, whatever the statistics say;
- an attempt is found by one probe per job of the (job_id, number) index (``_attempts_of``),
  then written by its own primary key;
- a condition that an admin history index would match (queue, kind, status, each then
  created_at) is a filter only (``_filter_only``, ``_RUNNING``) where it is not the pick's own;
- a pick (due rows, expired leases) reads its partial index in order under a LIMIT; when stale
  statistics would still send it elsewhere, reliableq.planguard analyzes the table.

tests/plans holds each statement to fixed bounds in each statistics state.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from . import db, faults, planguard
from .conf import reliableq_settings
from .floors import ClaimFloors, RescueFloor
from .models import Attempt, Job, JobStatus, Outcome, QueueState, RateWindow, ReturnValue
from .registry import Limits, Rate

logger = logging.getLogger("reliableq.leases")

JOB = Job._meta.db_table
ATTEMPT = Attempt._meta.db_table
RETURN_VALUE = ReturnValue._meta.db_table
QUEUE = QueueState._meta.db_table
RATE = RateWindow._meta.db_table
RATE_BUCKETS = 20  # a rate window is counted in this many buckets (see RateWindow)
RATE_SHARDS = 8  # a rated kind's N is shared by up to this many rows, each locked by one claimer at a time
KEY_CANDIDATES = 4  # a per-key claim looks at this many due rows per free slot, past saturated keys
RESCUE_BATCH = 100
DUE_INDEX = "reliableq_job_due"  # the partial index every pick of due jobs should read
# The owner's fence, status half: checked on every row, like `status = 'RUNNING'`, but never used
# to choose an index: the lease index (or the admin's status index) would read every RUNNING job
# of the fleet to renew or finish a worker's few, where the primary key reads just those.
_RUNNING = "(j.status = 'RUNNING') IS TRUE"


_CANCEL_LOCK = threading.Lock()
MAX_PROGRESS_NOTE = 200


def progress_value(done: Any, total: Any = None, note: Any = "") -> dict[str, Any]:
    """A progress report checked: numbers that JSON can hold, a short note."""
    for name, number in (("done", done), ("total", total)):
        if number is None and name == "total":
            continue
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise TypeError(f"job.progress(): {name} must be a finite number, not {number!r}.")
    if not isinstance(note, str):
        raise TypeError("job.progress(): note must be a string.")
    return {"done": done, "total": total, "note": note[:MAX_PROGRESS_NOTE]}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedJob:
    """What a handler sees: one attempt of one job, owned under one lease token."""

    id: uuid.UUID
    kind: str
    queue: str
    priority: int
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    worker_id: str
    snoozes: int = 0
    concurrency_key: str | None = None
    run_at: Any = None  # when it became due: where the claim found it (reliableq.floors)
    trace_context: dict[str, str] | None = None  # the enqueuing span's, for the attempt's span (reliableq.tracing)
    # Made on first use (most jobs never need one): set by the heartbeat when its renewal finds that
    # an operator asked to cancel this job.
    _cancel: threading.Event | None = field(default=None, compare=False, repr=False)
    # Where job.progress() reports (the worker's ledger, or a child's socket); None: kept on the job.
    _sink: Any = field(default=None, compare=False, repr=False)
    _last_progress: Any = field(default=None, compare=False, repr=False)

    def progress(self, done: float, total: float | None = None, note: str = "") -> None:
        """Say how far the handler is: recorded at most once a second, fenced by this attempt's lease.

        The admin's job page and GET /v1/jobs/<id> show the latest ({done, total, note, at}). Cheap
        to call often: nothing is written from the handler's thread, so async handlers may call it too.
        """
        value = progress_value(done, total, note)
        object.__setattr__(self, "_last_progress", value)
        if self._sink is not None:
            self._sink(self, value)

    @property
    def cancel(self) -> threading.Event:
        """Set once an operator asked to cancel this running job: a handler may wait on it."""
        event = self._cancel
        if event is None:
            with _CANCEL_LOCK:
                event = self._cancel
                if event is None:
                    event = threading.Event()
                    object.__setattr__(self, "_cancel", event)
        return event

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked to cancel this running job (learned at a lease renewal)."""
        event = self._cancel
        return event is not None and event.is_set()

    @property
    def idempotency_key(self) -> str:
        """The effect key: the same on every attempt and every replay of this job."""
        return f"reliableq:{self.kind}:{self.id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """How one attempt ended and what becomes of its job."""

    job_id: uuid.UUID
    lease_token: uuid.UUID
    # SUCCEEDED, PENDING (a retry or a snooze), DEAD or CANCELLED. A retry or a snooze of a job an
    # operator asked to cancel ends CANCELLED instead, decided in the finish statement.
    status: str
    outcome: str
    error: str = ""
    delay: float = 0.0
    keeps_return: bool = False  # store return_value if (and only if) this finish passes the fence
    return_value: Any = None
    traceback: str = ""  # a failed attempt's redacted, bounded traceback (Attempt.traceback)


@dataclass(frozen=True, slots=True)
class Rescued:
    job_id: uuid.UUID
    attempt: int
    status: str
    previous_worker: str


@dataclass(slots=True)
class FinishResult:
    finalized: list[uuid.UUID] = field(default_factory=list)
    lost: list[uuid.UUID] = field(default_factory=list)
    # Finalized jobs the statement ended CANCELLED instead of retrying them (an operator had asked).
    cancelled: set[uuid.UUID] = field(default_factory=set)


def _sql(queryset: Any) -> tuple[str, tuple[Any, ...]]:
    sql, params = queryset.query.get_compiler(using=queryset.db).as_sql()
    return sql, tuple(params)


def _payload(value: Any) -> dict[str, Any]:
    # Django registers a text loader for jsonb on psycopg 3, so raw cursors see strings.
    return json.loads(value) if isinstance(value, str) else value


def _filter_only(condition: str, params: Sequence[Any]) -> RawSQL:
    """A condition the planner checks on each row it reads but never uses to choose an index.

    The admin's history indexes (queue, kind or status, then created_at) match a plain condition
    on those columns. With statistics that underrate the matching rows, the planner may then
    read the whole history of a queue or a kind to find a few due or expired rows. In a WHERE
    clause `(...) IS TRUE` means the same, and no index matches it.
    """
    return RawSQL(f"({condition}) IS TRUE", tuple(params), output_field=BooleanField())


def _attempts_of(keys: str, match: str) -> str:
    """SQL: an ARRAY of the ids of the attempts that `match` finds, at most one (the newest) per row of `keys`.

    `keys` names a CTE or list with an `id` column (job ids); `match` may use its row as k and the
    attempt as o. Each row gets its own probe of the (job_id, number) index: a LIMIT inside an
    index-ordered subquery, which no statistics can turn into a scan (job_id is not unique, so
    with no statistics a plain `job_id = ANY(...)` of many ids looks like most of the table).
    """
    return (
        f"ARRAY(SELECT o.id FROM {keys} AS k CROSS JOIN LATERAL ("
        f"SELECT o.id FROM {ATTEMPT} o WHERE o.job_id = k.id AND {match} ORDER BY o.number DESC LIMIT 1) AS o)"
    )


def claim(
    *,
    worker_id: str,
    queues: Sequence[str],
    limit: int,
    lease_seconds: float,
    caps: Mapping[str, int] | None = None,
    limits: Mapping[str, Limits] | None = None,
    rescue: bool = True,
    floors: ClaimFloors | None = None,
) -> tuple[list[ClaimedJob], list[Rescued]]:
    """Take up to `limit` due jobs, best priority first, and open an attempt for each.

    One short transaction. Its row locks are held only for these statements; the caller
    runs handlers after the commit, so no network call ever happens under them. `limits`
    maps kinds to what their claims must respect (max_running, max_running_per_key,
    rate_limit; `caps` is the max_running-only form); those kinds are claimed after the
    others, each under its own locks (_take_limited). With `rescue`, expired leases are taken
    back first, in the same transaction; without rescue and limits, the claim is a single
    statement sent in autocommit: one round trip, no BEGIN or COMMIT. Paused queues give nothing.
    With `floors` (a worker's), the claim of the unlimited kinds starts at each queue's floor.
    """
    if limit < 1:
        return [], []
    controlled = {kind: Limits(max_running=cap) for kind, cap in (caps or {}).items()}
    controlled.update(limits or {})
    queues = tuple(queues)
    if rescue:
        guard_claims(queues, limit)
    if not rescue and not controlled:
        return _take(queues, limit, worker_id, lease_seconds, floors=floors), []
    # A kind limited by its rate alone is claimed by one statement of its own, in autocommit; the
    # others need locks held from one statement to the next, so a transaction.
    rated = {kind: lim.rate for kind, lim in controlled.items() if lim.rate and not (lim.max_running or lim.per_key)}
    locked = {kind: lim for kind, lim in controlled.items() if kind not in rated}
    rescued: list[Rescued] = []
    if rescue or locked:
        with db.atomic():
            rescued = _rescue_expired(queues) if rescue else []
            jobs = _take(queues, limit, worker_id, lease_seconds, exclude=tuple(sorted(controlled)), floors=floors)
            # Kinds in one order in every claimer, and each kind's locks in one order (its cap, its
            # rate window, its keys by hash): two claimers never wait for each other in a cycle.
            for kind, kind_limits in sorted(locked.items()):
                room = limit - len(jobs)
                if room <= 0:
                    break
                jobs += _take_limited(queues, room, worker_id, lease_seconds, kind, kind_limits)
    else:
        jobs = _take(queues, limit, worker_id, lease_seconds, exclude=tuple(sorted(controlled)), floors=floors)
    for kind, rate in sorted(rated.items()):
        room = limit - len(jobs)
        if room <= 0:
            break
        jobs += _take_rated(queues, room, worker_id, lease_seconds, kind, rate)
    return jobs, rescued


def _take_rated(
    queues: tuple[str, ...], room: int, worker_id: str, lease_seconds: float, kind: str, rate: Rate
) -> list[ClaimedJob]:
    """Claim jobs of a kind limited by its rate alone: one statement locks a shard of the kind's
    window that has room, takes what that room allows and records the starts (_rated_sql). The
    shards are made on first use."""
    statement = _rated_sql(queues, room, kind, rate)
    jobs, _ = _claim(statement, worker_id, lease_seconds)
    if jobs:
        return jobs
    with db.cursor() as cursor:  # nothing taken: was it for want of the window's rows?
        cursor.execute(
            f"INSERT INTO {RATE} (kind, shard, buckets, counts)"
            f" SELECT %s, shard, '{{}}', '{{}}' FROM generate_series(0, %s - 1) AS shard"
            " ON CONFLICT (kind, shard) DO NOTHING",
            [kind, rate_shards(rate)],
        )
        made = cursor.rowcount > 0
    return _claim(statement, worker_id, lease_seconds)[0] if made else []


def rate_bucket(rate: Rate, moment: Any) -> int:
    """The number of the bucket (a twentieth of the rate's window, from the epoch) that holds `moment`."""
    return math.floor(moment.timestamp() * RATE_BUCKETS / rate.seconds)


def shard_room(rate: Rate, shard: int, shards: int, buckets: list[int], counts: list[int], now: Any) -> int:
    """Starts shard `shard` of `shards` may still make at database time `now`: its share of N (N // K,
    one more for the first N % K) less its starts in every bucket that overlaps (now - window, now],
    a partial bucket counted whole: never fewer starts than the window holds, so never more room."""
    share = rate.count // shards + (1 if shard < rate.count % shards else 0)
    oldest = rate_bucket(rate, now) - RATE_BUCKETS
    return share - sum(c for b, c in zip(buckets, counts, strict=True) if b >= oldest)


def rate_shards(rate: Rate) -> int:
    """How many rows share a rated kind's N: one per 64 of N, up to 8, so that up to 8 claimers
    at once need not wait; a small N stays whole, so one claim can use all of its room."""
    return max(1, min(RATE_SHARDS, rate.count // 64))


@functools.lru_cache(maxsize=256)
def _rated_sql(queues: tuple[str, ...], limit: int, kind: str, rate: Rate) -> tuple[str, tuple[Any, ...]]:
    """The claim of a rate-limited kind as one statement (see models.RateWindow for the counting).

    `rate_window` locks one shard with room, skipping shards other claimers hold; shard s may
    start N // K starts, plus one for the first N % K shards, so the shares add up to N. Its
    FOR UPDATE re-checks the room on the shard's newest version, so the room is counted from
    every start committed before. The pick may see, in this statement's snapshot, jobs that
    another claimer took since; their locks, re-checked, show them RUNNING and they are passed
    over. The starts are recorded at statement_timestamp(), the attempts' own start, in the same
    statement. With no shard found (none made yet, or all full or busy), nothing is taken.
    """
    picked_sql, picked_params = _picked_sql(queues, limit, (), kind)
    buckets, span, shards = RATE_BUCKETS, float(rate.seconds), rate_shards(rate)
    now_bucket = f"floor(extract(epoch FROM statement_timestamp()) * {buckets} / {span!r})::bigint"
    share = f"({rate.count // shards} + CASE WHEN r.shard < {rate.count % shards} THEN 1 ELSE 0 END)"
    used = (
        "coalesce((SELECT sum(u.c) FROM unnest(r.buckets, r.counts) AS u(b, c)"
        f" WHERE u.b >= {now_bucket} - {buckets}), 0)"
    )
    window = f"""
        rate_window AS MATERIALIZED (
            SELECT r.id, r.buckets, r.counts, {now_bucket} AS now_bucket, {share} - {used} AS room
              FROM {RATE} r
             WHERE r.kind = %s AND r.shard < {shards} AND {share} - {used} > 0
             ORDER BY r.shard
             LIMIT 1
               FOR UPDATE SKIP LOCKED
        ),
        picked AS MATERIALIZED (
            SELECT id FROM ({picked_sql}) AS due LIMIT coalesce((SELECT room FROM rate_window), 0)
        )"""
    recorded = f"""
            recorded AS (
                UPDATE {RATE} r SET (buckets, counts) = (
                    SELECT coalesce(array_agg(b ORDER BY b), '{{}}'), coalesce(array_agg(c ORDER BY b), '{{}}')
                      FROM (SELECT kept.b, sum(kept.c)::int AS c FROM (
                                SELECT u.b, u.c FROM rate_window w, unnest(w.buckets, w.counts) AS u(b, c)
                                 WHERE u.b >= w.now_bucket - {buckets}
                                UNION ALL
                                SELECT w.now_bucket, (SELECT count(*) FROM claimed)::int FROM rate_window w
                            ) AS kept GROUP BY kept.b) AS summed)
                 WHERE r.id = (SELECT id FROM rate_window) AND EXISTS (SELECT 1 FROM claimed)
            ),"""
    sql = _claim_sql("SELECT id FROM picked").replace(
        "WITH picked AS MATERIALIZED (SELECT id FROM picked),", f"WITH {window},", 1
    )
    sql = sql.replace("            opened AS (", recorded + "\n            opened AS (", 1)
    return sql, (kind, *picked_params)


def _take_limited(
    queues: tuple[str, ...], room: int, worker_id: str, lease_seconds: float, kind: str, limits: Limits
) -> list[ClaimedJob]:
    """Inside the claim transaction: take what `kind`'s limits leave room for, and count it."""
    if limits.max_running:
        room = min(room, _room_for(kind, limits.max_running))
    window = _RateWindow.lock(kind, limits.rate) if limits.rate else None
    if window is not None:
        room = min(room, window.room)
    if room <= 0:
        return []
    if limits.per_key:
        jobs, started = _take_ids(_pick_per_key(queues, room, kind, limits.per_key), worker_id, lease_seconds)
    else:
        jobs, started = _claim(_take_sql(queues, room, (), kind), worker_id, lease_seconds)
    if window is not None and jobs:
        window.record(len(jobs), started)
    return jobs


@dataclass(slots=True)
class _RateWindow:
    """A rate-limited kind's window, locked for this claim transaction (see models.RateWindow).

    For a kind that is also capped or limited per key: one shard, the whole of N, locked with
    the kind's other locks in the claim transaction.
    """

    kind: str
    rate: Rate
    buckets: list[int]
    counts: list[int]
    room: int

    @classmethod
    def lock(cls, kind: str, rate: Rate) -> _RateWindow:
        """Lock the kind's row (made on first use) and count the starts in the window ending now."""
        with db.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {RATE} (kind, shard, buckets, counts) VALUES (%s, 0, '{{}}', '{{}}')
                ON CONFLICT (kind, shard) DO UPDATE SET kind = EXCLUDED.kind
                RETURNING buckets, counts, statement_timestamp()
                """,
                [kind],
            )
            buckets, counts, now = cursor.fetchone()
        buckets, counts = list(buckets), list(counts)
        return cls(kind, rate, buckets, counts, shard_room(rate, 0, 1, buckets, counts, now))

    def record(self, started: int, at: Any) -> None:
        """Add `started` starts at database time `at` and forget buckets older than any window."""
        now = rate_bucket(self.rate, at)
        kept = {b: c for b, c in zip(self.buckets, self.counts, strict=True) if b >= now - RATE_BUCKETS}
        kept[now] = kept.get(now, 0) + started
        with db.cursor() as cursor:
            cursor.execute(
                f"UPDATE {RATE} SET buckets = %s, counts = %s WHERE kind = %s AND shard = 0",
                [list(kept), list(kept.values()), self.kind],
            )


def _pick_per_key(queues: tuple[str, ...], room: int, kind: str, per_key: int) -> list[uuid.UUID]:
    """Lock due rows of `kind` and keep at most `room` whose concurrency_key has room left.

    The pick skips keys already saturated (without a lock: a hint, so that a saturated key's
    backlog never blocks other keys); then each key's advisory lock is taken, in hash order, and
    its RUNNING rows counted after the lock: a claimer that took the key's last slot has
    committed by then, so two claimers never both fill it. Rows picked but not kept stay
    PENDING, locked only until this transaction ends.
    """
    sql, params = _picked_sql(queues, room * KEY_CANDIDATES, (), kind, per_key)
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        candidates = cursor.fetchall()  # (id, concurrency_key), best first
        keys = sorted({key for _, key in candidates if key is not None})
        running: dict[str, int] = {}
        if keys:
            cursor.execute(
                "SELECT count(pg_advisory_xact_lock(hashtext(%s), hashtext(k)))"
                " FROM (SELECT k FROM unnest(%s::text[]) AS k ORDER BY hashtext(k), k OFFSET 0) AS keys",
                [f"reliableq:key:{kind}", keys],
            )
            cursor.execute(
                f"SELECT concurrency_key, count(*) FROM {JOB} WHERE status = 'RUNNING' AND kind = %s"
                " AND concurrency_key = ANY(%s) GROUP BY concurrency_key",
                [kind, keys],
            )
            running = dict(cursor.fetchall())
    kept: list[uuid.UUID] = []
    for job_id, key in candidates:
        if len(kept) >= room:
            break
        if key is not None:
            if running.get(key, 0) >= per_key:
                continue
            running[key] = running.get(key, 0) + 1
        kept.append(job_id)
    return kept


def guard_claims(queues: Sequence[str], limit: int = 10) -> None:
    """If stale statistics would make a claim's pick leave the due index, analyze now.

    Once per rescue interval (the maintenance leader, or a claim with rescue): cheaper than
    claiming through a walk of the backlog until autovacuum analyzes the table.
    """
    planguard.keep_index(*_picked_sql(tuple(queues), limit, (), None), table=JOB, index=DUE_INDEX)


def _room_for(kind: str, cap: int) -> int:
    """How many more `kind` jobs may start fleet-wide; holds the kind's lock until commit.

    The transaction-scoped advisory lock makes concurrent claimers of one capped kind take
    turns, so two of them can never both see room for the same last slot.
    """
    with db.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"reliableq:max_running:{kind}"])
        # Counted over the RUNNING rows only (the lease index), the kind compared above the
        # OFFSET 0 fence: given `kind = %s` down there, the planner may read the kind's whole
        # history through reliableq_job_kind_created, every finished job of the kind included.
        cursor.execute(
            f"SELECT count(*) FROM (SELECT kind FROM {JOB} WHERE status = 'RUNNING' OFFSET 0) AS running"
            " WHERE kind = %s",
            [kind],
        )
        running = cursor.fetchone()[0]
    return cap - running


def _claim_sql(picked_sql: str) -> str:
    """The claim statement around a pick (a query of due, locked job ids): mark RUNNING, open attempts.

    Time is in the SQL (statement_timestamp(), now()), never in the parameters, so a cached
    statement is as fresh as a new one.
    """
    # statement_timestamp(), not now(), for the lease and the attempt's start: a claim of a limited
    # kind may have waited for the kind's locks while another attempt finished; its attempt starts
    # after that wait. (No SQL comments in the statement: bench.ceilings sends it as one line.)
    return f"""
            WITH picked AS MATERIALIZED ({picked_sql}),
            claimed AS (
                UPDATE {JOB} j
                   SET status = 'RUNNING',
                       attempts = j.attempts + 1,
                       lease_token = gen_random_uuid(),
                       lease_expires_at = statement_timestamp() + make_interval(secs => %s),
                       worker_id = %s,
                       updated_at = statement_timestamp()
                 WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
             RETURNING j.id, j.kind, j.queue, j.priority, j.payload, j.attempts,
                       j.max_attempts, j.lease_token, j.run_at, j.snoozes, j.concurrency_key, j.trace_context
            ),
            opened AS (
                INSERT INTO {ATTEMPT} (job_id, number, worker_id, lease_token, started_at, outcome, error)
                SELECT id, attempts, %s, lease_token, statement_timestamp(), 'RUNNING', '' FROM claimed
            )
            SELECT id, kind, queue, priority, payload, attempts, max_attempts, lease_token, snoozes,
                   concurrency_key, statement_timestamp(), run_at, trace_context
              FROM claimed
             ORDER BY priority, run_at, id
            """


@functools.lru_cache(maxsize=1024)
def _take_sql(
    queues: tuple[str, ...], limit: int, exclude: tuple[str, ...], kind: str | None, floored: bool = False
) -> tuple[str, tuple[Any, ...]]:
    """The claim statement for these queues and this limit, compiled by the ORM once and then reused."""
    picked_sql, picked_params = _picked_sql(queues, limit, exclude, kind, floored=floored)
    return _claim_sql(picked_sql), picked_params


# A queue state row `q` that pauses its queue now, by database time.
_PAUSED_NOW = "q.paused_at IS NOT NULL AND (q.paused_until IS NULL OR q.paused_until > now())"

# Rows already picked and locked by this transaction (a per-key claim), claimed by id. The pick
# and this take are two statements with the keys' lock waits between them: a pause that commits
# in a wait is seen here (a fresh snapshot), and the rows of its queue are left PENDING.
_TAKE_IDS_SQL = _claim_sql(
    f"SELECT p.id FROM unnest(%s::uuid[]) AS p(id) JOIN {JOB} pj ON pj.id = p.id"
    f" WHERE NOT EXISTS (SELECT 1 FROM {QUEUE} q WHERE q.name = pj.queue AND {_PAUSED_NOW})"
)


def _paused(queue: str) -> RawSQL:
    """True while `queue` is paused, by database time. It names no row of the job table, so the
    planner checks it once per statement (a one-time filter), not once per row."""
    return RawSQL(
        f"EXISTS (SELECT 1 FROM {QUEUE} q WHERE q.name = %s AND {_PAUSED_NOW})",
        (queue,),
        output_field=BooleanField(),
    )


def _key_saturated(per_key: int) -> RawSQL:
    """True for a row whose concurrency_key already has `per_key` RUNNING jobs of its kind (a hint:
    read without the key's lock; _pick_per_key decides under it)."""
    return RawSQL(
        f"""(SELECT count(*) FROM (SELECT 1 FROM {JOB} r WHERE r.status = 'RUNNING'
              AND r.kind = {JOB}.kind AND r.concurrency_key = {JOB}.concurrency_key LIMIT %s) AS running) >= %s""",
        (per_key, per_key),
        output_field=BooleanField(),
    )


@dataclass(frozen=True, slots=True)
class _Floor:
    """A parameter of a floored pick, filled in at each claim: a queue's floor (priority, run_at, id)."""

    queue: str
    part: int


def _floor_condition(queue: str) -> RawSQL:
    """Rows at or past the queue's floor. A plain condition, so the due index's scan starts there
    (after `queue =`, the index's next columns are priority, run_at and id: a row comparison bounds them)."""
    return RawSQL(
        "(priority, run_at, id) >= ((%s)::integer, (%s)::timestamptz, (%s)::uuid)",
        (_Floor(queue, 0), _Floor(queue, 1), _Floor(queue, 2)),
        output_field=BooleanField(),
    )


@functools.lru_cache(maxsize=1024)
def _picked_sql(
    queues: tuple[str, ...],
    limit: int,
    exclude: tuple[str, ...],
    kind: str | None,
    per_key: int | None = None,
    *,
    floored: bool = False,
) -> tuple[str, tuple[Any, ...]]:
    """Lock the best `limit` due rows of these queues: ids only, each queue read in due-index order.

    With one queue, the due index hands rows over in (priority, run_at) order and the LIMIT
    stops the scan. That index is ordered by queue first, so several queues cannot be read in
    one ordered pass: a single query would sort every due row of every queue (the whole backlog)
    to keep `limit` of them. Instead each queue gives its own best `limit` unlocked rows (one
    bounded index scan each) and the best `limit` of those are kept: the same rows, since the
    global best `limit` are among each queue's best `limit`. The rows a queue gave but that were
    not kept stay locked, unchanged, until this claim commits; other claimers skip them meanwhile.
    A paused queue's arm gives nothing. With `per_key`, rows whose concurrency_key is saturated
    are passed over, and each row's key comes with its id. `floored` picks read each queue from
    its floor, a parameter (_Floor) the claim fills in (reliableq.floors).
    """
    if not queues:
        raise ValueError("A claim needs at least one queue.")
    columns = ["id", "priority", "run_at"] + (["concurrency_key"] if per_key else [])
    arms = []
    for queue in dict.fromkeys(queues):
        due = Job.objects.due().filter(queue=queue).exclude(_paused(queue))
        if floored:
            due = due.filter(_floor_condition(queue))
        if exclude:
            due = due.exclude(kind__in=list(exclude))
        if kind is not None:
            due = due.filter(_filter_only("kind = %s", [kind]))
        if per_key:
            due = due.exclude(_key_saturated(per_key))
        ordered = due.order_by("priority", "run_at", "id").values(*columns)
        arms.append(ordered.select_for_update(skip_locked=True)[:limit])
    with db.atomic():  # the ORM compiles FOR UPDATE only inside a transaction; nothing is sent here
        compiled = [_sql(arm) for arm in arms]
    picked = "id, concurrency_key" if per_key else "id"
    if len(compiled) == 1:
        [(sql, params)] = compiled
        return f"SELECT {picked} FROM ({sql}) AS due", params
    union = " UNION ALL ".join(f"SELECT * FROM ({sql}) AS due_{n}" for n, (sql, _) in enumerate(compiled))
    params = tuple(p for _, arm_params in compiled for p in arm_params)
    return f"SELECT {picked} FROM ({union}) AS due ORDER BY priority, run_at, id LIMIT {int(limit)}", params


def _claim(
    statement: tuple[str, tuple[Any, ...]], worker_id: str, lease_seconds: float
) -> tuple[list[ClaimedJob], Any]:
    """Run a claim statement; return the jobs it took and its database time (None if it took none)."""
    sql, picked_params = statement
    with db.cursor() as cursor:
        cursor.execute(sql, (*picked_params, float(lease_seconds), worker_id, worker_id))
        rows = cursor.fetchall()
    jobs = [
        ClaimedJob(
            id=row[0],
            kind=row[1],
            queue=row[2],
            priority=row[3],
            payload=_payload(row[4]),
            attempt=row[5],
            max_attempts=row[6],
            lease_token=row[7],
            worker_id=worker_id,
            snoozes=row[8],
            concurrency_key=row[9],
            run_at=row[11],
            trace_context=_payload(row[12]) if row[12] is not None else None,
        )
        for row in rows
    ]
    return jobs, rows[0][10] if rows else None


def _take(
    queues: tuple[str, ...],
    limit: int,
    worker_id: str,
    lease_seconds: float,
    *,
    exclude: tuple[str, ...] = (),
    kind: str | None = None,
    floors: ClaimFloors | None = None,
) -> list[ClaimedJob]:
    """Lock up to `limit` due rows (skipping rows others hold), mark them RUNNING, open attempts.

    With `floors`, each queue is read from its floor (or from the start, when a sweep is due), and
    the floors move with what the claim took.
    """
    if floors is None or kind is not None:
        jobs, _ = _claim(_take_sql(queues, limit, exclude, kind), worker_id, lease_seconds)
        return jobs
    sweep = floors.sweeping()
    began = time.monotonic()
    sql, params = _take_sql(queues, limit, exclude, kind, floored=True)
    filled = tuple(floors.bound(p.queue, sweep=sweep)[p.part] if isinstance(p, _Floor) else p for p in params)
    jobs, at = _claim((sql, filled), worker_id, lease_seconds)
    floors.claimed([(job.queue, job.priority, job.run_at, job.id) for job in jobs], at=at, sweep=sweep, began=began)
    return jobs


def _take_ids(ids: list[uuid.UUID], worker_id: str, lease_seconds: float) -> tuple[list[ClaimedJob], Any]:
    """Claim rows this transaction has picked and locked already."""
    if not ids:
        return [], None
    return _claim((_TAKE_IDS_SQL, (ids,)), worker_id, lease_seconds)


def rescue(floor: RescueFloor | None = None) -> list[Rescued]:
    """Take back expired leases in every queue, one batch, in a transaction of its own.

    The fleet's maintenance leader calls this once per interval (reliableq.worker.maintenance);
    claims then need no rescue of their own. With `floor` (the leader's), the lease index is
    read from the floor, or from its start when a sweep is due (reliableq.floors).
    """
    if floor is None:
        with db.atomic():
            return _rescue_expired(())
    sweep = floor.sweeping()
    began = time.monotonic()
    with db.atomic():
        with db.cursor() as cursor:
            cursor.execute("SELECT now()")
            at = cursor.fetchone()[0]
        rescued = _rescue_expired((), since=floor.bound(sweep=sweep))
    floor.rescued(at=at, complete=len(rescued) < RESCUE_BATCH, sweep=sweep, began=began)
    return rescued


def _rescue_expired(queues: Sequence[str], since: Any = None) -> list[Rescued]:
    """Take back RUNNING jobs whose lease ran out: close the open attempt, requeue or bury.

    Runs inside the claim transaction, so a requeued job can be claimed by the very next
    statement. Attempts are counted at claim, so a job that kills its worker every time
    still spends its budget and ends DEAD here.
    """
    sql, params = _rescue_sql(tuple(queues), since is not None)
    with db.cursor() as cursor:
        cursor.execute(sql, tuple(since if p is _SINCE else p for p in params))
        rescued = [Rescued(*row) for row in cursor.fetchall()]
    for r in rescued:
        fate: dict[str, str] = {JobStatus.DEAD: "buried: no attempts left", JobStatus.CANCELLED: "cancelled on request"}
        logger.warning(
            "job=%s attempt=%s lease expired (worker %s); %s",
            r.job_id,
            r.attempt,
            r.previous_worker,
            fate.get(r.status, "requeued"),
        )
    return rescued


_SINCE = _Floor("", -1)  # where the floored rescue's bound goes in the compiled statement, filled in per call


@functools.lru_cache(maxsize=256)
def _rescue_sql(queues: tuple[str, ...], floored: bool = False) -> tuple[str, tuple[Any, ...]]:
    """The rescue statement for these queues, compiled once (time is in the SQL, not the parameters).

    No join reaches either table: each is read by key, so no statistics can turn the statement
    into a nested loop over a whole index. A job has at most one open attempt (a claim opens one
    only for a PENDING job, and every way out of RUNNING closes it), so the attempt closed is the
    job's newest, if still RUNNING. The job's worker_id is not changed here, so RETURNING
    j.worker_id is the owner whose lease ran out. `floored`: only leases that expired at or after
    the first parameter (a RescueFloor's bound), so the lease index is read from there.
    """
    found = Job.objects.expired()
    if floored:
        found = found.filter(RawSQL("lease_expires_at >= (%s)::timestamptz", (_SINCE,), output_field=BooleanField()))
    if queues:  # none: every queue (the maintenance leader's rescue, for the whole fleet)
        found = found.filter(_filter_only("queue = ANY(%s)", [list(queues)]))
    expired = found.order_by("lease_expires_at").values("id").select_for_update(skip_locked=True)[:RESCUE_BATCH]
    with db.atomic():  # the ORM compiles FOR UPDATE only inside a transaction; nothing is sent here
        expired_sql, expired_params = _sql(expired)
    return (
        f"""
            WITH expired AS MATERIALIZED ({expired_sql}),
            closed AS (
                UPDATE {ATTEMPT} a
                   SET outcome = 'LEASE_EXPIRED',
                       finished_at = now(),
                       error = format('lease expired: worker %%s stopped renewing it', a.worker_id)
                 WHERE a.id = ANY({_attempts_of("expired", "o.outcome = 'RUNNING'")}) AND a.outcome = 'RUNNING'
            )
            UPDATE {JOB} j
               SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'CANCELLED'
                                 WHEN j.attempts >= j.max_attempts THEN 'DEAD' ELSE 'PENDING' END,
                   run_at = CASE WHEN j.attempts >= j.max_attempts OR j.cancel_requested_at IS NOT NULL
                                 THEN j.run_at ELSE now() END,
                   finished_at = CASE WHEN j.attempts >= j.max_attempts OR j.cancel_requested_at IS NOT NULL
                                      THEN now() END,
                   lease_token = NULL,
                   lease_expires_at = NULL,
                   last_error = format(
                       'lease of attempt %%s/%%s expired: worker %%s stopped renewing it%%s',
                       j.attempts, j.max_attempts, j.worker_id,
                       CASE WHEN j.cancel_requested_at IS NOT NULL THEN '; cancelled on request'
                            WHEN j.attempts >= j.max_attempts THEN '; no attempts left' ELSE '' END),
                   updated_at = now()
             WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
         RETURNING j.id, j.attempts, j.status, j.worker_id
            """,
        expired_params,
    )


def renew(leases: Iterable[tuple[uuid.UUID, uuid.UUID]], *, lease_seconds: float) -> dict[uuid.UUID, bool]:
    """Extend every lease this process holds in one statement.

    Returns the job ids still owned, each with whether an operator asked to cancel it: the
    worker learns of a cancel request by the renewal it makes anyway (every LEASE_SECONDS/3),
    with no connection of its own, so it works through a transaction pooler too.
    """
    leases = list(leases)
    if not leases:
        return {}
    ids, tokens = zip(*leases, strict=True)
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {JOB} j
               SET lease_expires_at = now() + make_interval(secs => %s)
              FROM unnest(%s::uuid[], %s::uuid[]) AS held(id, token)
             WHERE j.id = ANY(%s::uuid[]) AND {_RUNNING}
               AND j.id = held.id AND j.lease_token = held.token
         RETURNING j.id, j.cancel_requested_at IS NOT NULL
            """,
            (float(lease_seconds), list(ids), list(tokens), list(ids)),
        )
        return dict(cursor.fetchall())


def record_progress(reports: Iterable[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]) -> int:
    """Write the latest progress of these attempts in one statement, fenced by their lease tokens."""
    reports = list(reports)
    if not reports:
        return 0
    ids, tokens, values = zip(*reports, strict=True)
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {JOB} j SET progress = v.progress::jsonb || jsonb_build_object('at', now())
              FROM unnest(%s::uuid[], %s::uuid[], %s::text[]) AS v(id, token, progress)
             WHERE j.id = ANY(%s::uuid[]) AND {_RUNNING} AND j.id = v.id AND j.lease_token = v.token
            """,
            (list(ids), list(tokens), [json.dumps(v) for v in values], list(ids)),
        )
        return int(cursor.rowcount)


def mark_lost(leases: Iterable[tuple[uuid.UUID, uuid.UUID]], *, reason: str) -> set[uuid.UUID]:
    """Record LEASE_LOST on attempts still open under these tokens; never touch their jobs.

    Returns the jobs really lost to another owner: those just marked, and those whose attempt
    a rescuer already closed (LEASE_EXPIRED). An attempt its owner finished itself (a finish
    that raced the heartbeat) is not a loss and is not returned.
    """
    leases = list(leases)
    if not leases:
        return set()
    ids, tokens = zip(*leases, strict=True)
    # A lease token belongs to one attempt of its job: `found` holds it, by one probe per job.
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            WITH lost AS MATERIALIZED (SELECT * FROM unnest(%s::uuid[], %s::uuid[]) AS lost(id, token)),
            found AS MATERIALIZED (
                SELECT a.id, a.job_id, a.outcome FROM {ATTEMPT} a
                 WHERE a.id = ANY({_attempts_of("lost", "o.lease_token = k.token")})
            ),
            marked AS (
                UPDATE {ATTEMPT} a
                   SET outcome = 'LEASE_LOST', finished_at = now(), error = %s
                 WHERE a.id = ANY(ARRAY(SELECT id FROM found)) AND a.outcome = 'RUNNING'
             RETURNING a.job_id
            )
            SELECT job_id FROM marked
            UNION
            SELECT job_id FROM found WHERE outcome IN ('LEASE_EXPIRED', 'LEASE_LOST')
            """,
            (list(ids), list(tokens), reason),
        )
        return {row[0] for row in cursor.fetchall()}


def release_unacknowledged(*, worker_id: str, known: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """Put back jobs this worker claimed in a transaction whose commit it never heard about.

    When the connection drops during the claim's COMMIT, the claim may have committed: the
    jobs are RUNNING under our worker id with tokens we never received. Worker ids are unique
    per process, so every such row is ours; requeue it now instead of waiting for its lease.
    Attempts stay counted: the claim happened.
    """
    with db.atomic():
        with db.cursor() as cursor:
            cursor.execute(
                f"""
                WITH orphans AS MATERIALIZED (
                    SELECT id, lease_token FROM {JOB}
                     WHERE status = 'RUNNING' AND worker_id = %s AND NOT (lease_token = ANY(%s::uuid[]))
                       FOR UPDATE
                ),
                closed AS (
                    UPDATE {ATTEMPT} a
                       SET outcome = 'LEASE_LOST', finished_at = now(),
                           error = 'claim commit was not acknowledged; the worker released the job'
                     WHERE a.id = ANY({_attempts_of("orphans", "o.lease_token = k.lease_token")})
                       AND a.outcome = 'RUNNING'
                )
                UPDATE {JOB} j
                   SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'DEAD' ELSE 'PENDING' END,
                       finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
                       run_at = now(), lease_token = NULL, lease_expires_at = NULL, updated_at = now(),
                       last_error = 'claim commit was not acknowledged; the worker released the job'
                  FROM orphans
                 WHERE j.id = ANY(ARRAY(SELECT id FROM orphans))
                   AND j.id = orphans.id AND j.lease_token = orphans.lease_token
             RETURNING j.id
                """,
                (worker_id, [str(t) for t in known]),
            )
            return [row[0] for row in cursor.fetchall()]


def _store_returns(finishes: Sequence[Finish]) -> None:
    """Inside the finish transaction: keep the return values of the attempts that passed the fence."""
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {RETURN_VALUE} (job_id, value)
            SELECT id, value::jsonb FROM unnest(%s::uuid[], %s::text[]) AS r(id, value)
            ON CONFLICT (job_id) DO UPDATE SET value = EXCLUDED.value
            """,
            ([f.job_id for f in finishes], [json.dumps(f.return_value) for f in finishes]),
        )


def finish(finishes: Sequence[Finish]) -> FinishResult:
    """Write the end of many attempts in one fenced statement and one transaction.

    A job whose token no longer matches is left alone; its attempt is marked LEASE_LOST
    (unless the new owner already closed it as LEASE_EXPIRED, or a timeout closed it).
    """
    result = FinishResult()
    if not finishes:
        return result
    columns = list(
        zip(
            *((f.job_id, f.lease_token, f.status, f.outcome, f.error, float(f.delay), f.traceback) for f in finishes),
            strict=True,
        )
    )
    # One statement is atomic on its own: in autocommit it costs one round trip, not three (BEGIN,
    # the statement, COMMIT). A transaction only where more must commit with it: kept return values
    # (fenced by the same statement), or the crash point between the write and its commit.
    together = any(f.keeps_return for f in finishes) or bool(reliableq_settings.FAULT_INJECTION)
    # Each attempt takes its values from `closing` by a subquery, not by a join: a join to the
    # attempts could be planned as a scan of them for each row of `closing`.
    with db.atomic() if together else contextlib.nullcontext():
        with db.cursor() as cursor:
            cursor.execute(
                f"""
                WITH v AS (
                    SELECT * FROM unnest(%s::uuid[], %s::uuid[], %s::text[], %s::text[], %s::text[], %s::float8[],
                                         %s::text[])
                        AS v(id, token, status, outcome, error, delay, traceback)
                ),
                fin AS (
                    UPDATE {JOB} j
                       SET status = CASE WHEN v.status = 'PENDING' AND j.cancel_requested_at IS NOT NULL
                                         THEN 'CANCELLED' ELSE v.status END,
                           run_at = CASE WHEN v.status = 'PENDING' AND j.cancel_requested_at IS NULL
                                         THEN now() + make_interval(secs => v.delay) ELSE j.run_at END,
                           finished_at = CASE WHEN v.status = 'PENDING' AND j.cancel_requested_at IS NULL
                                              THEN NULL ELSE now() END,
                           max_attempts = j.max_attempts + CASE WHEN v.outcome = 'SNOOZED'
                                                                 AND j.cancel_requested_at IS NULL THEN 1 ELSE 0 END,
                           snoozes = j.snoozes + CASE WHEN v.outcome = 'SNOOZED'
                                                      AND j.cancel_requested_at IS NULL THEN 1 ELSE 0 END,
                           lease_token = NULL,
                           lease_expires_at = NULL,
                           last_error = v.error,
                           updated_at = now()
                      FROM v
                     WHERE j.id = ANY(ARRAY(SELECT id FROM v)) AND {_RUNNING}
                       AND j.id = v.id AND j.lease_token = v.token
                 RETURNING j.id, v.token,
                           CASE WHEN j.status = 'CANCELLED' THEN 'CANCELLED' ELSE v.outcome END, v.error, v.traceback
                ),
                closing AS MATERIALIZED (
                    SELECT o.id, fin.outcome, fin.error, fin.traceback FROM fin CROSS JOIN LATERAL (
                        SELECT o.id FROM {ATTEMPT} o WHERE o.job_id = fin.id AND o.lease_token = fin.token
                         ORDER BY o.number DESC LIMIT 1) AS o
                )
                UPDATE {ATTEMPT} a
                   SET (outcome, error, traceback, finished_at) = (
                           SELECT c.outcome, c.error, c.traceback, now() FROM closing c WHERE c.id = a.id)
                 WHERE a.id = ANY(ARRAY(SELECT id FROM closing))
             RETURNING a.job_id, a.outcome
                """,
                [list(c) for c in columns],
            )
            rows = cursor.fetchall()
        finalized = {job_id for job_id, _ in rows}
        result.cancelled = {job_id for job_id, outcome in rows if outcome == Outcome.CANCELLED}
        result.finalized = [f.job_id for f in finishes if f.job_id in finalized]
        kept = [f for f in finishes if f.keeps_return and f.job_id in finalized]
        if kept:
            _store_returns(kept)
        lost = [(f.job_id, f.lease_token) for f in finishes if f.job_id not in finalized]
        if lost:
            mark_lost(lost, reason="lease lost before finalize: another owner has the job")
            result.lost = [job_id for job_id, _ in lost]
        # The third failure window: the finalize is written but not yet committed.
        faults.crash_point("during_finalize")
    return result
