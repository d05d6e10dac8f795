"""What operators watch: counts by status and kind, the age of the oldest due job, the last hour's charts."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import Now

from .. import registry
from ..models import Attempt, Job, JobStatus, Outcome, QueueState, RateWindow
from . import db
from .limits import rate_shards, shard_room
from .sql import ATTEMPT, JOB, S

_OLDEST_DUE_SQL = (
    f"SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(run_at)), 0) FROM {Job._meta.db_table} "
    f"WHERE status = {S.PENDING} AND run_at <= now()"
)


def oldest_due_age_seconds() -> float:
    """Seconds the oldest due PENDING job has waited past its run_at (0 when none), by database time."""
    with db.cursor() as cursor:
        cursor.execute(_OLDEST_DUE_SQL)
        (age,) = cursor.fetchone()
    return max(0.0, float(age))


def queues(limit: int | None = None, *, after: str = "") -> list[str]:
    """Distinct queue names by a loose index scan: one index probe per queue, not a table scan.

    With `limit`, the first `limit` names in order (after `after`): the recursion is pulled on
    demand and stops there.
    """
    return _distinct("queue", limit, after)


def kinds(limit: int | None = None) -> list[str]:
    """Distinct kinds that have jobs, the same way (the kind index): a kind with no job is not listed,
    and a kind with jobs but no handler in this process (renamed, removed) is."""
    return _distinct("kind", limit, "")


def _distinct_sql(column: str) -> str:
    """The loose index scan of `column`, which leads an index of the job table: (queue, created_at),
    (kind, created_at)."""
    return f"""
            WITH RECURSIVE q(name) AS (
                (SELECT {column} FROM {JOB} WHERE {column} > %s ORDER BY {column} LIMIT 1)
                UNION ALL
                SELECT (SELECT {column} FROM {JOB} WHERE {column} > q.name ORDER BY {column} LIMIT 1)
                  FROM q WHERE q.name IS NOT NULL
            )
            SELECT name FROM q WHERE name IS NOT NULL LIMIT %s
            """


_QUEUES_SQL = _distinct_sql("queue")
_KINDS_SQL = _distinct_sql("kind")
_DISTINCT = {"queue": _QUEUES_SQL, "kind": _KINDS_SQL}


def _distinct(column: str, limit: int | None, after: str) -> list[str]:
    with db.cursor() as cursor:
        cursor.execute(
            _DISTINCT[column],
            [after, limit],
        )
        return [row[0] for row in cursor.fetchall()]


NAMES_TO_SUGGEST = 1000  # queue names read, at most, to suggest the closest to one that is unused


_UNUSED_QUEUES_SQL = f"""
            SELECT name FROM unnest(%s::text[]) AS name
             WHERE NOT EXISTS (SELECT 1 FROM {JOB} j WHERE j.queue = name)
               AND NOT EXISTS (SELECT 1 FROM {QueueState._meta.db_table} s WHERE s.name = name)
            """


def unused_queues(names: Sequence[str]) -> dict[str, list[str]]:
    """Of these queue names, each that holds no job and no pause state (a typo, most often), with the
    closest names of queues that do. One index probe per name; then at most NAMES_TO_SUGGEST names."""
    with db.cursor() as cursor:
        cursor.execute(
            _UNUSED_QUEUES_SQL,
            [list(names)],
        )
        unused = [row[0] for row in cursor.fetchall()]
    if not unused:
        return {}
    states = QueueState.objects.order_by("name").values_list("name", flat=True)[:NAMES_TO_SUGGEST]
    known = sorted(set(queues(NAMES_TO_SUGGEST)) | set(states))
    return {name: difflib.get_close_matches(name, known, n=3, cutoff=0.6) for name in unused}


QUEUE_PAGE = 100  # queues per page of /v1/queues, the dashboard and `reliableq_queue list` by default
MAX_QUEUE_PAGE = 500


def queue_page(*, after: str = "", limit: int = QUEUE_PAGE) -> tuple[list[QueueSummary], str | None]:
    """At most `limit` queues (with jobs or a pause state), by name, after `after`; and the name to
    continue after, or None on the last page.

    Bounded whatever the tables hold: `limit` + 1 probes of the queue index and of the states, then
    the counts of those queues alone.
    """
    names = sorted(
        set(queues(limit + 1, after=after))
        | set(QueueState.objects.filter(name__gt=after).order_by("name").values_list("name", flat=True)[: limit + 1])
    )[: limit + 1]
    more = len(names) > limit
    names = names[:limit]
    return queue_summaries(names), (names[-1] if more else None)


FAILED = (
    Outcome.FAILED_TRANSIENT,
    Outcome.FAILED_PERMANENT,
    Outcome.TIMED_OUT,
    Outcome.LEASE_EXPIRED,
    Outcome.LEASE_LOST,
)


def last_hour() -> dict[str, int]:
    """Attempts started in the last hour (database time) and how many of them failed."""
    recent = Attempt.objects.filter(started_at__gte=Now() - dt.timedelta(hours=1))
    counts = recent.aggregate(attempts=Count("id"), failures=Count("id", filter=Q(outcome__in=FAILED)))
    return {"attempts": counts["attempts"], "failures": counts["failures"]}


def snapshot() -> dict[str, Any]:
    by_status = {s: 0 for s in JobStatus.values}
    by_kind: dict[str, dict[str, int]] = {}
    for row in Job.objects.values("kind", "status").annotate(n=Count("id")).order_by():
        by_status[row["status"]] += row["n"]
        by_kind.setdefault(row["kind"], {})[row["status"]] = row["n"]
    paused = paused_queues()
    return {
        "by_status": by_status,
        "by_kind": by_kind,
        "oldest_due_pending_age_seconds": round(oldest_due_age_seconds(), 3),
        "dead": by_status[JobStatus.DEAD],
        "paused": paused_due(paused),
        "throttled": throttled_due(paused),
    }


# -- flow control: queues, paused and throttled work ------------------------------------------------
#
# Every count here reads due PENDING rows (status = 'PENDING' AND run_at <= now(), the partial index
# reliableq_job_due) or RUNNING rows (the partial index reliableq_job_lease): never finished jobs,
# however many there are.


_SEQSCAN_OFF_SQL = "SELECT current_setting('enable_seqscan'), set_config('enable_seqscan', 'off', true)"


_SEQSCAN_BACK_SQL = "SELECT set_config('enable_seqscan', %s, true)"


@contextmanager
def _through_indexes() -> Iterator[None]:
    """Run the block's statements with sequential scans of tables that have an index ruled out.

    The counts below want the due PENDING rows; when the statistics say those are a large share
    of the job table (a backlog analyzed, then a pile-up of finished rows), the planner would read
    the whole table instead of the partial index. These reads are not hot, so they pay a
    transaction and two set_config calls to stay bounded by the unfinished rows. The setting is
    transaction-local and put back, so a caller's open transaction keeps its own.
    """
    with db.atomic(), db.cursor() as cursor:
        cursor.execute(_SEQSCAN_OFF_SQL)
        previous = cursor.fetchone()[0]
        try:
            yield
        finally:
            cursor.execute(_SEQSCAN_BACK_SQL, [previous])


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSummary:
    """One queue as operators see it: its pause state and its unfinished work."""

    name: str
    paused: bool  # no claim takes its jobs now (by database time)
    paused_until: dt.datetime | None  # while paused: when the pause ends by itself (None: until resumed)
    paused_by: str  # while paused: who paused it ("" for code)
    pending: int  # PENDING jobs, due or scheduled later
    running: int  # RUNNING jobs
    oldest_due_age_seconds: float  # how long its oldest due PENDING job has waited past run_at (0: none)


def paused_queues(queues: Sequence[str] | None = None) -> set[str]:
    """The queues paused now, by database time (of `queues`, or all)."""
    found = QueueState.objects.filter(paused_at__isnull=False).filter(
        Q(paused_until__isnull=True) | Q(paused_until__gt=Now())
    )
    if queues is not None:
        found = found.filter(name__in=list(queues))
    return set(found.values_list("name", flat=True))


# (queue || '') rather than queue, in the filter and the grouping: the column itself can lead the
# planner (under statistics that think the table tiny) to the index of every row by queue, finished
# ones included; the expression leaves it the partial indexes. The cost: one queue's summary reads
# every PENDING row, bounded by the backlog, never by the history.
def _summaries_sql(among: bool) -> str:
    """queue_summaries' statement: of every queue, or (`among`) of the queues given as its parameter."""
    among_sql = " AND (queue || '') = ANY(%s)" if among else ""
    return f"""
            SELECT queue || '', count(*), 0, EXTRACT(EPOCH FROM now() - min(run_at) FILTER (WHERE run_at <= now()))
              FROM {JOB} WHERE status = {S.PENDING}{among_sql} GROUP BY queue || ''
            UNION ALL
            SELECT queue || '', 0, count(*), NULL FROM {JOB} WHERE status = {S.RUNNING} GROUP BY queue || ''
            """


_SUMMARIES_SQL = _summaries_sql(False)
_SUMMARIES_OF_SQL = _summaries_sql(True)


def queue_summaries(names: Sequence[str] | None = None) -> list[QueueSummary]:
    """Every queue with jobs or a pause state (or just `names`), by name.

    One statement: PENDING rows grouped by queue through the due index, RUNNING rows through the
    lease index; then the queues' names by a loose index scan (stats.queues()) and the states.
    """
    only = list(names) if names is not None else None
    counts: dict[str, list[Any]] = {}
    with _through_indexes(), db.cursor() as cursor:
        cursor.execute(
            _SUMMARIES_SQL if only is None else _SUMMARIES_OF_SQL,
            # RUNNING rows are few (the fleet's concurrency) and their index has no queue column:
            # all of them are counted, grouped by an expression no index provides in order, since a
            # filter on queue or a GROUP BY queue leads the planner (under statistics that think the
            # table tiny) to the index of every row by queue, finished ones included.
            [] if only is None else [only],
        )
        for queue, pending, running, age in cursor.fetchall():
            if only is not None and queue not in only:
                continue
            row = counts.setdefault(queue, [0, 0, 0.0])
            row[0] += pending
            row[1] += running
            if age is not None:
                row[2] = max(0.0, float(age))
    states = QueueState.objects.all() if only is None else QueueState.objects.filter(name__in=only)
    by_name = {state.name: state for state in states}
    paused = paused_queues()
    listed = sorted(set(queues()) | set(by_name) | set(counts)) if only is None else sorted(set(only))
    summaries = []
    for name in listed:
        pending, running, age = counts.get(name, [0, 0, 0.0])
        state = by_name.get(name)
        is_paused = name in paused and state is not None
        summaries.append(
            QueueSummary(
                name=name,
                paused=is_paused,
                paused_until=state.paused_until if is_paused and state else None,
                paused_by=state.paused_by if is_paused and state else "",
                pending=int(pending),
                running=int(running),
                oldest_due_age_seconds=round(age, 3),
            )
        )
    return summaries


_PAUSED_DUE_SQL = (
    f"SELECT count(*) FROM {Job._meta.db_table}"
    f" WHERE status = {S.PENDING} AND run_at <= now() AND (queue || '') = ANY(%s)"
)


def paused_due(paused: set[str] | None = None) -> int:
    """Due PENDING jobs in the queues paused now: work that waits only because of a pause."""
    paused = paused_queues() if paused is None else paused
    if not paused:
        return 0
    with _through_indexes(), db.cursor() as cursor:
        cursor.execute(
            _PAUSED_DUE_SQL,  # as in queue_summaries
            [sorted(paused)],
        )
        return int(cursor.fetchone()[0])


_RUNNING_OF_KINDS_SQL = f"SELECT kind, count(*) FROM {JOB} WHERE status = {S.RUNNING} AND kind = ANY(%s) GROUP BY kind"


_SATURATED_KEYS_SQL = f"""
                SELECT r.kind, r.concurrency_key
                  FROM {JOB} r JOIN unnest(%s::text[], %s::int[]) AS l(kind, n) ON l.kind = r.kind
                 WHERE r.status = {S.RUNNING} AND r.concurrency_key IS NOT NULL
                 GROUP BY r.kind, r.concurrency_key, l.n HAVING count(*) >= l.n
                """


_THROTTLED_DUE_SQL = f"""
            SELECT count(*) FROM {JOB}
             WHERE status = {S.PENDING} AND run_at <= now() AND queue <> ALL(%s)
               AND (kind = ANY(%s) OR (kind, concurrency_key) IN (SELECT * FROM unnest(%s::text[], %s::text[])))
            """


def throttled_due(paused: set[str] | None = None) -> int:
    """Due PENDING jobs, in queues not paused, that a limit holds back right now.

    A job counts when its kind is at its max_running (RUNNING jobs of the kind), or its kind's
    rate window is full (the starts counted as the claim counts them), or its concurrency_key has
    max_running_per_key RUNNING jobs. Due jobs of a limited kind that merely wait for a free worker
    do not count. A snapshot: a claim may take them a moment later.
    """
    limited = registry.limits()
    if not limited:
        return 0
    paused = paused_queues() if paused is None else paused
    with _through_indexes(), db.cursor() as cursor:
        cursor.execute(
            _RUNNING_OF_KINDS_SQL,
            [sorted(limited)],
        )
        running = dict(cursor.fetchall())
        full = {k for k, lim in limited.items() if lim.max_running and running.get(k, 0) >= lim.max_running}
        full |= _rate_full({k: lim for k, lim in limited.items() if lim.rate and k not in full})
        per_key = {k: lim.per_key for k, lim in limited.items() if lim.per_key and k not in full}
        # The saturated (kind, key) pairs, from the RUNNING rows only.
        pairs: list[tuple[str, str]] = []
        if per_key:
            cursor.execute(
                _SATURATED_KEYS_SQL,
                [list(per_key), list(per_key.values())],
            )
            pairs = cursor.fetchall()
        if not full and not pairs:
            return 0
        cursor.execute(
            _THROTTLED_DUE_SQL,
            [sorted(paused), sorted(full), [k for k, _ in pairs], [c for _, c in pairs]],
        )
        return int(cursor.fetchone()[0])


_STATEMENT_TIME_SQL = "SELECT statement_timestamp()"


def _rate_full(limited: dict[str, registry.Limits]) -> set[str]:
    """Kinds whose rate window has no room now in any of its shards, counted as the claim counts.

    A kind limited by its rate alone spreads N over rate_shards(rate) rows, shard s holding
    N // K (plus one for the first N % K); a kind also capped or limited per key keeps all of N in
    shard 0 (reliableq.queue.limits). A shard not made yet has all of its share free.
    """
    if not limited:
        return set()
    with db.cursor() as cursor:
        cursor.execute(_STATEMENT_TIME_SQL)
        now = cursor.fetchone()[0]
    windows: dict[tuple[str, int], RateWindow] = {
        (w.kind, w.shard): w for w in RateWindow.objects.filter(kind__in=list(limited))
    }
    full = set()
    for kind, limits in limited.items():
        rate = limits.rate
        assert rate is not None
        shards = 1 if (limits.max_running or limits.per_key) else rate_shards(rate)
        rooms = []
        for shard in range(shards):
            window = windows.get((kind, shard))  # a shard not made yet: no starts
            buckets, counts = (window.buckets, window.counts) if window is not None else ([], [])
            rooms.append(shard_room(rate, shard, shards, buckets, counts, now))
        if all(r <= 0 for r in rooms):
            full.add(kind)
    return full


# -- the dashboard's charts: the last hour, minute by minute, by database time ----------------------
#
# The hour is the 60 one-minute buckets that end with the current (partial) minute. date_trunc, not
# date_bin, so that PostgreSQL 13 runs it. Each query reads only rows of that hour through an index
# (jobs by finished_at, attempts by started_at), except the backlog's still-waiting jobs, which are
# the due PENDING ones, read through the claim's index.

CHART_MINUTES = 60
# Statuses a finished job ends in, in the order the chart stacks them.
FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
# Attempts whose duration is not the handler's: still running, or ended because the worker went away.
NOT_HANDLER_TIME = (Outcome.RUNNING, Outcome.LEASE_EXPIRED, Outcome.LEASE_LOST)
MAX_CHART_KINDS = 20

_MINUTES_SQL = f"""
    SELECT generate_series(date_trunc('minute', now()) - interval '{CHART_MINUTES - 1} minutes',
                           date_trunc('minute', now()), interval '1 minute') AS minute
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedMinute:
    """Jobs that finished during one minute, by the status they ended in."""

    minute: dt.datetime  # the minute's start
    counts: dict[str, int]  # every status of FINISHED_STATUSES, zero included


@dataclass(frozen=True, slots=True, kw_only=True)
class BacklogPoint:
    """Due jobs still waiting for their first attempt at the end of one minute."""

    minute: dt.datetime  # the minute's start; the count is taken at its end (or now, for this minute)
    waiting: int


@dataclass(frozen=True, slots=True, kw_only=True)
class KindDuration:
    """The 95th percentile of a kind's handler durations over the last hour."""

    kind: str
    p95_seconds: float
    attempts: int  # how many finished attempts the percentile is taken over


_FINISHED_PER_MINUTE_SQL = f"""
            WITH minutes AS ({_MINUTES_SQL}),
            finished AS (
                SELECT date_trunc('minute', finished_at) AS minute, status, count(*) AS n
                  FROM {Job._meta.db_table}
                 WHERE finished_at >= (SELECT min(minute) FROM minutes)
                 GROUP BY 1, 2
            )
            SELECT m.minute, f.status, f.n FROM minutes m LEFT JOIN finished f USING (minute) ORDER BY m.minute
            """


def finished_per_minute() -> list[FinishedMinute]:
    """Jobs finished in each minute of the last hour, by final status, oldest minute first."""
    with db.cursor() as cursor:
        cursor.execute(_FINISHED_PER_MINUTE_SQL)
        rows = cursor.fetchall()
    by_minute: dict[dt.datetime, dict[str, int]] = {}
    for minute, status, n in rows:
        counts = by_minute.setdefault(minute, {s: 0 for s in FINISHED_STATUSES})
        if status in counts:
            counts[status] = n
    return [FinishedMinute(minute=m, counts=c) for m, c in by_minute.items()]


_BACKLOG_PER_MINUTE_SQL = f"""
            WITH minutes AS ({_MINUTES_SQL}),
            since AS (SELECT min(minute) AS t FROM minutes),
            waits AS (
                -- still waiting: PENDING, never started, due
                SELECT greatest(j.created_at, j.run_at) AS joined, NULL::timestamptz AS left_at
                  FROM {JOB} j
                 WHERE j.status = {S.PENDING} AND j.run_at <= now()
                   AND NOT EXISTS (SELECT 1 FROM {ATTEMPT} a WHERE a.job_id = j.id)
                UNION ALL
                -- first attempt started during the hour
                SELECT least(greatest(j.created_at, j.run_at), a.started_at), a.started_at
                  FROM {ATTEMPT} a JOIN {JOB} j ON j.id = a.job_id
                 WHERE a.started_at >= (SELECT t FROM since) AND a.number = 1
                UNION ALL
                -- finished during the hour without ever starting (cancelled while waiting)
                SELECT least(greatest(j.created_at, j.run_at), j.finished_at), j.finished_at
                  FROM {JOB} j
                 WHERE j.finished_at >= (SELECT t FROM since)
                   AND NOT EXISTS (SELECT 1 FROM {ATTEMPT} a WHERE a.job_id = j.id)
            ),
            -- +1 when a job joins, -1 when it leaves; what happened before the hour counts in its first minute
            steps AS (
                SELECT greatest(date_trunc('minute', joined), (SELECT t FROM since)) AS minute, count(*) AS n
                  FROM waits GROUP BY 1
                UNION ALL
                SELECT date_trunc('minute', left_at), -count(*) FROM waits WHERE left_at IS NOT NULL GROUP BY 1
            )
            SELECT m.minute, sum(coalesce(sum(s.n), 0)) OVER (ORDER BY m.minute)
              FROM minutes m LEFT JOIN steps s USING (minute)
             GROUP BY m.minute ORDER BY m.minute
            """


def backlog_per_minute() -> list[BacklogPoint]:
    """Due jobs waiting for their first attempt at the end of each minute of the last hour.

    Rebuilt from the jobs' times, not sampled: a job joins the backlog when it is due (the later
    of created_at and run_at) and leaves it when its first attempt starts, or when it finishes
    without one (cancelled). A job waiting to retry is not counted: its earlier waits are not
    stored. For a job that has started, run_at may since have been moved by a retry; its wait
    then counts from no later than its first start, so such a wait can be under-counted, never
    over-counted.
    """
    with db.cursor() as cursor:
        cursor.execute(_BACKLOG_PER_MINUTE_SQL)
        return [BacklogPoint(minute=minute, waiting=int(n)) for minute, n in cursor.fetchall()]


_P95_BY_KIND_SQL = f"""
            SELECT j.kind,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM a.finished_at - a.started_at)),
                   count(*)
              FROM {Attempt._meta.db_table} a JOIN {Job._meta.db_table} j ON j.id = a.job_id
             WHERE a.started_at >= now() - interval '1 hour' AND a.finished_at IS NOT NULL
               AND a.outcome <> ALL(%s)
             GROUP BY j.kind ORDER BY 2 DESC, j.kind LIMIT %s
            """


def p95_by_kind(limit: int = MAX_CHART_KINDS) -> list[KindDuration]:
    """The p95 handler duration of each kind over attempts started in the last hour that have finished.

    Slowest first, at most `limit` kinds. Attempts that ended because their worker went away
    (lease expired or lost) are left out: their length is the lease's, not the handler's.
    """
    with db.cursor() as cursor:
        cursor.execute(
            _P95_BY_KIND_SQL,
            [list(NOT_HANDLER_TIME), limit],
        )
        return [KindDuration(kind=kind, p95_seconds=float(p95), attempts=n) for kind, p95, n in cursor.fetchall()]


# Handler durations, for the metrics histogram: bucket bounds in seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


_BUCKETS = ", ".join(f"count(*) FILTER (WHERE d <= {b})" for b in DURATION_BUCKETS)
_HISTOGRAMS_SQL = f"""
            SELECT kind, {_BUCKETS}, COALESCE(sum(d), 0), count(*)
              FROM (SELECT j.kind, EXTRACT(EPOCH FROM a.finished_at - a.started_at)::float8 AS d
                      FROM {Attempt._meta.db_table} a JOIN {Job._meta.db_table} j ON j.id = a.job_id
                     WHERE a.finished_at IS NOT NULL
                       AND a.outcome IN ({S.SUCCEEDED}, {S.FAILED_TRANSIENT}, {S.FAILED_PERMANENT})
                   ) durations
             GROUP BY kind
            """


def histograms() -> dict[str, tuple[list[int], float, int]]:
    """Per kind: cumulative counts per bucket, the sum and the count of finished attempt durations."""
    with db.cursor() as cursor:
        cursor.execute(_HISTOGRAMS_SQL)
        return {row[0]: (list(row[1:-2]), float(row[-2]), int(row[-1])) for row in cursor.fetchall()}


_ATTEMPTS_BY_OUTCOME_SQL = f"SELECT outcome, count(*) FROM {Attempt._meta.db_table} GROUP BY outcome"


def attempts_by_outcome() -> dict[str, int]:
    counts = {o: 0 for o in Outcome.values}
    with db.cursor() as cursor:
        cursor.execute(_ATTEMPTS_BY_OUTCOME_SQL)
        counts.update(dict(cursor.fetchall()))
    return counts
