"""Claims under a kind's limits, fleet-wide: max_running caps, per-key limits and rate windows.

stats imports the rate-window arithmetic from here, so that what the dashboard calls room is
what a claim computes."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..registry import Limits, Rate
from . import db
from .functions import KEY_ROOM
from .pick import claim_sql, picked_sql, run_claim, take_sql
from .records import ClaimedJob
from .sql import JOB, RATE, S

RATE_BUCKETS = 20  # a rate window is counted in this many buckets (see RateWindow)


RATE_SHARDS = 8  # a rated kind's N is shared by up to this many rows, each locked by one claimer at a time


KEY_CANDIDATES = 2  # a per-key claim looks at this many due rows per free slot, past saturated keys


_MAKE_SHARDS_SQL = (
    f"INSERT INTO {RATE} (kind, shard, buckets, counts)"
    f" SELECT %s, shard, '{{}}', '{{}}' FROM generate_series(0, %s - 1) AS shard"
    " ON CONFLICT (kind, shard) DO NOTHING"
)


class Taken(NamedTuple):
    """What a limited kind's claim took."""

    jobs: list[ClaimedJob]
    at: Any  # the claim's database time (None: it took none)
    none_due: bool = False  # the kind had no due row to take, not merely no room for one (ClaimFloors.idle)


def take_rated(
    queues: tuple[str, ...],
    room: int,
    worker_id: str,
    lease_seconds: float,
    kind: str,
    rate: Rate,
    *,
    fair: bool = False,
) -> Taken:
    """Claim jobs of a kind limited by its rate alone: one statement locks a shard of the kind's
    window that has room, takes what that room allows and records the starts (rated_sql). The
    shards are made on first use. When it takes none, one more read says whether any was due."""
    statement = rated_sql(queues, room, kind, rate, fair)
    jobs, at = run_claim(statement, worker_id, lease_seconds)
    if jobs:
        return Taken(jobs, at)
    with db.cursor() as cursor:  # nothing taken: was it for want of the window's rows?
        cursor.execute(
            _MAKE_SHARDS_SQL,
            [kind, rate_shards(rate)],
        )
        made = cursor.rowcount > 0
    if made:
        jobs, at = run_claim(statement, worker_id, lease_seconds)
        if jobs:
            return Taken(jobs, at)
    return Taken([], None, none_due=not _any_due(queues, kind))


def _any_due(queues: tuple[str, ...], kind: str) -> bool:
    """Whether `kind` has a due row no other claim holds (locked only for this statement, in autocommit)."""
    sql, params = picked_sql(queues, 1, (), kind)
    return bool(db.fetch(sql, params))


def rate_bucket(rate: Rate, moment: Any) -> int:
    """The number of the bucket (a twentieth of the rate's window, from the epoch) that holds `moment`."""
    bucket: int = math.floor(moment.timestamp() * RATE_BUCKETS / rate.seconds)
    return bucket


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
def rated_sql(
    queues: tuple[str, ...], limit: int, kind: str, rate: Rate, fair: bool = False
) -> tuple[str, tuple[Any, ...]]:
    """The claim of a rate-limited kind as one statement (see models.RateWindow for the counting).

    `rate_window` locks one shard with room, skipping shards other claimers hold; shard s may
    start N // K starts, plus one for the first N % K shards, so the shares add up to N. Its
    FOR UPDATE re-checks the room on the shard's newest version, so the room is counted from
    every start committed before. The pick may see, in this statement's snapshot, jobs that
    another claimer took since; their locks, re-checked, show them RUNNING and they are passed
    over. The starts are recorded at statement_timestamp(), the attempts' own start, in the same
    statement. With no shard found (none made yet, or all full or busy), nothing is taken.
    """
    pick, pick_params = picked_sql(queues, limit, (), kind, fair=(kind,) if fair else ())
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
            SELECT id FROM ({pick}) AS due LIMIT coalesce((SELECT room FROM rate_window), 0)
        )"""
    recorded = f"""
            recorded AS (
                UPDATE {RATE} r SET (buckets, counts) = (
                    SELECT coalesce(array_agg(b ORDER BY b), '{{}}'), coalesce(array_agg(c ORDER BY b), '{{}}')
                      FROM (SELECT kept.b, sum(kept.c)::int AS c FROM (
                                SELECT u.b, u.c FROM rate_window w, unnest(w.buckets, w.counts) AS u(b, c)
                                 WHERE u.b >= w.now_bucket - {buckets}
                                UNION ALL
                                SELECT w.now_bucket, (SELECT count(*) FROM moved)::int FROM rate_window w
                            ) AS kept GROUP BY kept.b) AS summed)
                 WHERE r.id = (SELECT id FROM rate_window) AND EXISTS (SELECT 1 FROM moved)
            ),"""
    return claim_sql(before=window, beside=recorded), (kind, *pick_params)


def take_limited(
    queues: tuple[str, ...], room: int, worker_id: str, lease_seconds: float, kind: str, limits: Limits
) -> Taken:
    """Inside the claim transaction: take what `kind`'s limits leave room for, and count it."""
    if limits.max_running:
        room = min(room, _room_for(kind, limits.max_running))
    window = _RateWindow.lock(kind, limits.rate) if limits.rate else None
    if window is not None:
        room = min(room, window.room)
    if room <= 0:
        return Taken([], None)
    fair = (kind,) if limits.fair else ()
    if limits.per_key:
        taken = _take_per_key(queues, room, worker_id, lease_seconds, kind, limits.per_key, fair)
    else:
        jobs, started = run_claim(take_sql(queues, room, (), kind, fair=fair), worker_id, lease_seconds)
        taken = Taken(jobs, started, none_due=not jobs)
    if window is not None and taken.jobs:
        window.record(len(taken.jobs), taken.at)
    return taken


_LOCK_WINDOW_SQL = f"""
                INSERT INTO {RATE} (kind, shard, buckets, counts) VALUES (%s, 0, '{{}}', '{{}}')
                ON CONFLICT (kind, shard) DO UPDATE SET kind = EXCLUDED.kind
                RETURNING buckets, counts, statement_timestamp()
                """


_RECORD_WINDOW_SQL = f"UPDATE {RATE} SET buckets = %s, counts = %s WHERE kind = %s AND shard = 0"


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
                _LOCK_WINDOW_SQL,
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
                _RECORD_WINDOW_SQL,
                [list(kept), list(kept.values()), self.kind],
            )


@functools.lru_cache(maxsize=256)
def keyed_sql(
    queues: tuple[str, ...], room: int, kind: str, per_key: int, fair: tuple[str, ...] = ()
) -> tuple[str, tuple[Any, ...]]:
    """The claim of up to `room` due jobs of `kind` whose concurrency_key has room left, in one statement.

    The pick locks up to KEY_CANDIDATES due rows a slot, passing over keys already saturated (a hint
    read without a lock, so that a saturated key's backlog never blocks the others); their keys are
    then tried, best candidate first, and each one's room read under its lock (functions.KEY_ROOM, in
    a snapshot taken after the lock: two claimers never both fill a key's last slot). A key another
    claimer holds has no room here, as SKIP LOCKED passes over its rows: that claimer is filling it.
    (Waiting for it serialized the fleet: two claims' candidates share a key almost always.) Rows
    picked but not kept stay PENDING, locked only until the statement ends."""
    pick, pick_params = picked_sql(queues, room * KEY_CANDIDATES, (), kind, per_key, fair=fair)
    # Each candidate's key is asked as the LIMIT pulls the candidates, best first, so a claim asks no
    # more keys than it needs (the filter, volatile, stays above the sort). A key's later candidates
    # past per_key are passed over without asking.
    # The attempts start, and their leases run, from a time read after every key was counted (not the
    # statement's start): a job that ended before a count let this claim in, and it ends before this
    # start, in the database's record as in fact.
    sql = claim_sql(
        before=f"""picked AS MATERIALIZED (SELECT p.id FROM (
            SELECT c.id, c.key, c.ord, row_number() OVER (PARTITION BY c.key ORDER BY c.ord) AS n FROM (
                SELECT c.id, c.concurrency_key AS key, row_number() OVER () AS ord FROM ({pick}) AS c
            ) AS c ORDER BY c.ord
        ) AS p
         WHERE p.key IS NULL OR (p.n <= %s AND p.n <= {KEY_ROOM}(%s, p.key, %s))
         LIMIT %s),
        counted AS MATERIALIZED (SELECT clock_timestamp() AS at FROM (SELECT count(*) FROM picked) AS c)""",
        clock="(SELECT at FROM counted)",
    )
    return sql, (*pick_params, per_key, kind, per_key, room)


def _take_per_key(
    queues: tuple[str, ...], room: int, worker_id: str, lease_seconds: float, kind: str, per_key: int,
    fair: tuple[str, ...] = (),
) -> Taken:  # fmt: skip
    """Claim up to `room` due jobs of `kind` whose concurrency_key has room left (keyed_sql); none_due
    when it took none and the kind has no due row (a kind whose keys are full is asked again)."""
    jobs, at = run_claim(keyed_sql(queues, room, kind, per_key, fair), worker_id, lease_seconds)
    if jobs:
        return Taken(jobs, at)
    return Taken([], None, none_due=not _any_due(queues, kind))


_KIND_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext(%s))"


_RUNNING_OF_KIND_SQL = (
    f"SELECT count(*) FROM (SELECT kind FROM {JOB} WHERE status = {S.RUNNING} OFFSET 0) AS running WHERE kind = %s"
)


def _room_for(kind: str, cap: int) -> int:
    """How many more `kind` jobs may start fleet-wide; holds the kind's lock until commit.

    The transaction-scoped advisory lock makes concurrent claimers of one capped kind take
    turns, so two of them can never both see room for the same last slot.
    """
    with db.cursor() as cursor:
        cursor.execute(_KIND_LOCK_SQL, [f"reliableq:max_running:{kind}"])
        # Counted over the RUNNING rows only (the lease index), the kind compared above the
        # OFFSET 0 fence: given `kind = %s` down there, the planner may read the kind's whole
        # history through reliableq_job_kind_created, every finished job of the kind included.
        cursor.execute(
            _RUNNING_OF_KIND_SQL,
            [kind],
        )
        running = cursor.fetchone()[0]
    return int(cap - running)
