"""The pick of due jobs and the claim statement built around it: mark RUNNING, open attempts."""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..floors import ClaimFloors
from . import db, door, fairness, functions, planguard
from .makers import maker
from .records import ClaimedJob
from .sql import ATTEMPT, DUE_INDEX, JOB, QUEUE, S, filter_only, json_value


def guard_tables() -> None:
    """Analyze the job and attempt tables if their committed rows outgrew their statistics fourfold.

    The maintenance leader's, before guard_claims: the plans the workers cached for their finishes
    and claims were made for the smaller tables (planguard.keep_up).
    """
    planguard.keep_up([JOB, ATTEMPT])


def guard_claims(queues: Sequence[str], limit: int = 10, fair: Sequence[str] = ()) -> None:
    """If stale statistics would make a claim's pick leave the due index, analyze now.

    Once per rescue interval (the maintenance leader, or a claim with rescue): cheaper than
    claiming through a walk of the backlog until autovacuum analyzes the table. With `fair` kinds,
    their pick in turn order too; the statistics it repairs serve their enqueue's reads as well.
    """
    if planguard.keep_index(*picked_sql(tuple(queues), limit, (), None), table=JOB, index=DUE_INDEX) or not fair:
        return
    planguard.keep_index(fairness.heads_sql(limit), (queues[0], fair[0]), table=JOB, index=fairness.FAIR_DUE_INDEX)


class ClaimRow(NamedTuple):
    """A row of the claim statement, by name: _CLAIM_COLUMNS gives each field its expression, in order."""

    id: uuid.UUID
    kind: str
    queue: str
    priority: int
    payload: Any  # JSON as text, or as decoded by the driver
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    snoozes: int
    concurrency_key: str | None
    claimed_epoch: float  # the claim's database time, in seconds since the epoch
    run_at_utc: str  # ISO 8601 in UTC, ending in +00:00
    trace_context: Any
    workflow_id: uuid.UUID | None
    member_name: str | None
    upstream: Any  # [[name, value], ...] for a member that runs on upstream failure, else None


# Each ClaimRow field's expression over `moved`, so a column cannot move without its name. Times come
# as a float (the claim's, on every row, read once) and as text in UTC (run_at): a timestamptz costs
# Django's time-zone loader per value, several times what the job's own work does.
_CLAIM_COLUMNS = {
    "id": "id", "kind": "kind", "queue": "queue", "priority": "priority", "payload": "payload",
    "attempt": "attempts", "max_attempts": "max_attempts", "lease_token": "lease_token", "snoozes": "snoozes",
    "concurrency_key": "concurrency_key",
    "claimed_epoch": "extract(epoch FROM {clock})::float8",
    "run_at_utc": """to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')""",
    "trace_context": "trace_context", "workflow_id": "workflow_id", "member_name": "member_name",
    "upstream": f"CASE WHEN on_upstream_failure <> '' THEN {functions.UPSTREAM}(id) END",
}  # fmt: skip
if tuple(_CLAIM_COLUMNS) != ClaimRow._fields:
    raise AssertionError("_CLAIM_COLUMNS must name ClaimRow's fields, in order")
_CLAIM_SELECT = ", ".join(f"{expression} AS {name}" for name, expression in _CLAIM_COLUMNS.items())

# The claim's time: the statement's start, but in a claim that counts under locks taken in the
# statement itself (limits.keyed_sql), a time read once those counts are made.
STATEMENT_START = "statement_timestamp()"


def claim_sql(pick: str = "", *, before: str = "", beside: str = "", clock: str = STATEMENT_START) -> str:
    """The claim statement around a pick (a query of due, locked job ids): mark RUNNING, open attempts.

    Composed by parameters: `pick` becomes the `picked` CTE; or `before` gives CTEs of its own, one
    of them named `picked` (a rated claim's window, then its pick; a keyed claim's pick, then the
    time read after it, its `clock`). `beside` is a CTE that runs in the same statement after
    `moved` (the jobs claimed: a rated claim's record of its starts), ending in a comma. The door
    (reliableq.queue.door) makes the statement.
    Time is in the SQL (statement_timestamp(), now(), or `clock`, an expression of the database's
    time), never in the parameters, so a cached statement is as fresh as a new one.
    """
    if bool(pick) == bool(before):
        raise ValueError("A claim needs a pick, or CTEs that define one, not both.")
    # statement_timestamp(), not now(), for the lease and the attempt's start: a claim of a limited
    # kind may have waited for the kind's locks while another attempt finished; its attempt starts
    # after that wait. (No -- comments in the statement: bench.ceilings sends it as one line.)
    head = before or f"picked AS MATERIALIZED ({pick})"
    return door.statement(
        "claim",
        head=f"{head},",
        moved=f"""UPDATE {JOB} j
                   SET status = {S.RUNNING},
                       attempts = j.attempts + 1,
                       lease_token = gen_random_uuid(),
                       lease_expires_at = {clock} + make_interval(secs => %s),
                       worker_id = %s,
                       updated_at = {clock}
                 WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
             RETURNING j.id, j.kind, j.queue, j.priority, j.payload, j.attempts,
                       j.max_attempts, j.lease_token, j.run_at, j.snoozes, j.concurrency_key, j.trace_context,
                       j.workflow_id, j.member_name, j.on_upstream_failure""",
        change=door.Change.STARTED,
        tail=f""",{beside}
            opened AS (
                INSERT INTO {ATTEMPT} (job_id, number, worker_id, lease_token, started_at, outcome, error)
                SELECT id, attempts, %s, lease_token, {clock}, {S.RUNNING}, '' FROM moved
            )
            SELECT {_CLAIM_SELECT.replace("{clock}", clock)}
              FROM moved
             ORDER BY moved.priority, moved.run_at, moved.id""",
    )


@functools.lru_cache(maxsize=1024)
def take_sql(
    queues: tuple[str, ...],
    limit: int,
    exclude: tuple[str, ...],
    kind: str | None,
    floored: bool = False,
    fair: tuple[str, ...] = (),
    walk: bool = True,
) -> tuple[str, tuple[Any, ...]]:
    """The claim statement for these queues and this limit, made once and then reused."""
    pick, pick_params = picked_sql(queues, limit, exclude, kind, floored=floored, fair=fair, walk=walk)
    return claim_sql(pick), pick_params


MAX_ID = "ffffffff-ffff-ffff-ffff-ffffffffffff"  # past every uuid

# A queue state row `q` that pauses its queue now, by database time.
PAUSED_NOW = "q.paused_at IS NOT NULL AND (q.paused_until IS NULL OR q.paused_until > now())"


# Rows already picked and locked by this transaction (a per-key claim), claimed by id. The pick
# and this take are two statements with the keys' lock waits between them: a pause that commits
# in a wait is seen here (a fresh snapshot), and the rows of its queue are left PENDING.
_TAKE_IDS_SQL = claim_sql(
    f"SELECT p.id FROM unnest(%s::uuid[]) AS p(id) JOIN {JOB} pj ON pj.id = p.id"
    f" WHERE NOT EXISTS (SELECT 1 FROM {QUEUE} q WHERE q.name = pj.queue AND {PAUSED_NOW})"
)


# True for a row whose concurrency_key already has N RUNNING jobs of its kind (parameters: N, N): a
# hint, read without the key's lock (limits._take_per_key decides under it).
KEY_SATURATED = f"""(SELECT count(*) FROM (SELECT 1 FROM {JOB} r WHERE r.status = {S.RUNNING}
              AND r.kind = {JOB}.kind AND r.concurrency_key = {JOB}.concurrency_key LIMIT %s) AS running) >= %s"""


@dataclass(frozen=True, slots=True)
class Floor:
    """A parameter of a floored pick, filled in at each claim: a queue's floor (priority, run_at, id)
    for parts 0 to 2, its since (ClaimFloors.bound) for part 3."""

    queue: str
    part: int


def _arm(queue: str, limit: int, exclude: tuple[str, ...], kind: str | None, per_key: int | None,
         names: tuple[str, ...], *, floored: bool, walk: bool) -> tuple[str, tuple[Any, ...]]:  # fmt: skip
    """One queue's best `limit` due, unlocked rows, in (priority, run_at, id) order.

    The due index is ordered (queue, priority, run_at, id): within one priority the rows due now come
    first and the rows due later (sleeping jobs, retries in backoff, jobs enqueued to run tomorrow)
    after them, so one scan of the queue would step over every one of those on each claim that
    finds fewer than `limit` due rows. So the queue is read a priority at a time: each priority's
    rows are one index range that ends at `run_at <= now`. A floored pick reads its floor's
    priority from the floor's row first (the one index range a claim usually needs); then, only if
    that gave too few, the priorities after it, each found by one index probe (a loose scan: the
    priorities in use are few). The ranges hand rows over in order and are pulled lazily, so the
    LIMIT ends the read as soon as it has enough. A pick without a floor (or a sweep) starts at
    the queue's first PENDING row. Without `walk`, a floored pick reads its floor's priority only:
    what a claim whose last one filled up sends (the walk's statement costs some 40 us more to
    start, read or not), leaving the priorities after it to the next claim if this one falls short.
    """
    pending = f"{JOB}.status = {S.PENDING} AND {JOB}.queue = %s"
    order = f"ORDER BY {JOB}.priority, {JOB}.run_at, {JOB}.id"
    not_paused = f"NOT EXISTS (SELECT 1 FROM {QUEUE} q WHERE q.name = %s AND {PAUSED_NOW})"
    filters, filter_params = "", list[Any]()
    if floored and exclude:  # the other kinds' backlog is never taken here: read only rows due since
        filters += f" AND {JOB}.run_at >= (%s)::timestamptz"
        filter_params.append(Floor(queue, 3))
    if exclude:
        placeholders = ", ".join(["%s"] * len(exclude))  # one each: an array's estimate sent picks off the index
        filters += f" AND {filter_only(f'{JOB}.kind NOT IN ({placeholders})')}"
        filter_params += exclude
    if kind is not None:
        filters += f" AND {filter_only(f'{JOB}.kind = %s')}"
        filter_params.append(kind)
    if per_key:
        filters += f" AND NOT {KEY_SATURATED}"
        filter_params += [per_key, per_key]
    columns = ", ".join(f"{JOB}.{name}" for name in names)

    def priority_range(priority: str, start: str = "") -> str:
        """One priority's due rows, from `start` (a condition on (run_at, id)) if given."""
        return f"""SELECT {columns} FROM {JOB}
             WHERE {pending} AND {JOB}.priority = {priority} AND {JOB}.run_at <= statement_timestamp(){start}{filters}
             ORDER BY {JOB}.run_at, {JOB}.id LIMIT {int(limit)} FOR UPDATE OF {JOB} SKIP LOCKED"""

    # The first priority of the walk: the first PENDING row's in index order, at or past `after`.
    def first(after: str) -> str:
        return f"(SELECT {JOB}.priority FROM {JOB} WHERE {pending} AND {not_paused}{after} {order} LIMIT 1)"

    walk_from, walk_params = first(""), list[Any]([queue, queue])
    head, head_params = "", list[Any]()
    if floored:
        # The floor's own priority, from the floor's row: (run_at, id), the columns after the
        # priority's equality, so that the index scan starts there.
        start = f" AND ({JOB}.run_at, {JOB}.id) >= ((%s)::timestamptz, (%s)::uuid)"
        head = f"SELECT * FROM ({priority_range('(%s)::integer', start)}) AS floor_priority UNION ALL "
        head_params = [queue, Floor(queue, 0), Floor(queue, 1), Floor(queue, 2), *filter_params]
        # Then the priorities after it: past every row of the floor's priority.
        walk_from = first(f" AND ({JOB}.priority, {JOB}.run_at, {JOB}.id) > ((%s)::integer, 'infinity', '{MAX_ID}')")
        walk_params = [queue, queue, Floor(queue, 0)]
    if floored and not walk:
        return (
            f"SELECT {', '.join(names)} FROM ({priority_range('(%s)::integer', start)}) AS due WHERE {not_paused}",
            (*head_params, queue),
        )
    walked = f"""SELECT * FROM (WITH RECURSIVE priorities(p) AS (
                SELECT {walk_from}
                UNION ALL
                SELECT (SELECT {JOB}.priority FROM {JOB}
                         WHERE {pending} AND {JOB}.priority > priorities.p {order} LIMIT 1)
                  FROM priorities WHERE priorities.p IS NOT NULL
            )
            SELECT d.* FROM priorities CROSS JOIN LATERAL ({priority_range("priorities.p")}) d) AS walk"""
    return (
        # The pause names no job row: a one-time filter, checked before anything is read.
        f"SELECT {', '.join(names)} FROM ({head}{walked} LIMIT {int(limit)}) AS due WHERE {not_paused}",
        (*head_params, *walk_params, queue, queue, *filter_params, queue),
    )


@functools.lru_cache(maxsize=1024)
def picked_sql(
    queues: tuple[str, ...],
    limit: int,
    exclude: tuple[str, ...],
    kind: str | None,
    per_key: int | None = None,
    *,
    floored: bool = False,
    fair: tuple[str, ...] = (),
    walk: bool = True,
) -> tuple[str, tuple[Any, ...]]:
    """Lock the best `limit` due rows of these queues: ids only, each queue read in due-index order.

    Each queue gives its own best `limit` unlocked rows (_arm: bounded index ranges) and, with
    several queues, the best `limit` of those are kept: the same rows, since the global best
    `limit` are among each queue's best `limit` (one index read across queues cannot give them in
    order: the index is ordered by queue first). The rows a queue gave but that were not kept stay
    locked, unchanged, until this claim commits; other claimers skip them meanwhile. A paused
    queue's arm gives nothing. With `per_key`, rows whose concurrency_key is saturated are passed
    over, and each row's key comes with its id. `floored` picks read each queue from its floor, a
    parameter (Floor) the claim fills in (reliableq.floors). Rows of the `fair` kinds stand for as
    many of those kinds' due jobs in turn order (fairness.substituted).
    """
    if not queues:
        raise ValueError("A claim needs at least one queue.")
    names = ["id", "priority", "run_at"] + (["concurrency_key"] if per_key else [])
    if fair:
        names += ["kind", "queue", "fair_seq"]
    arms = [
        _arm(queue, limit, exclude, kind, per_key, tuple(names), floored=floored, walk=walk)
        for queue in dict.fromkeys(queues)
    ]
    picked = ", ".join(names) if fair else "id, concurrency_key" if per_key else "id"
    params = tuple(p for _, arm_params in arms for p in arm_params)
    if len(arms) == 1:
        main = f"SELECT {picked} FROM ({arms[0][0]}) AS picked_due"
    else:
        union = " UNION ALL ".join(f"SELECT * FROM ({sql}) AS due_{n}" for n, (sql, _) in enumerate(arms))
        main = f"SELECT {picked} FROM ({union}) AS due ORDER BY priority, run_at, id LIMIT {int(limit)}"
    if not fair:
        return main, params
    saturated = (f" AND NOT {KEY_SATURATED}", (per_key, per_key)) if per_key else ("", ())
    pick = fairness.substituted(main, fair, per_key=saturated[0], with_key=bool(per_key))
    return pick, (*params, *fairness.substituted_params(fair, saturated[1]))


_claimed = maker(ClaimedJob)  # ClaimedJob(...), in half the time: one per claimed job


def run_claim(
    statement: tuple[str, tuple[Any, ...]], worker_id: str, lease_seconds: float
) -> tuple[list[ClaimedJob], Any]:
    """Run a claim statement; return the jobs it took and its database time (None if it took none).

    Each row is unpacked by ClaimRow's field names, in order, in the comprehension itself: no call
    and no ClaimRow per job (tests/unit/test_queue_statements.py holds the names to ClaimRow's)."""
    sql, picked_params = statement
    rows = db.fetch(sql, (*picked_params, float(lease_seconds), worker_id, worker_id))
    jobs = [
        _claimed(
            id=id,
            kind=kind,
            queue=queue,
            priority=priority,
            payload={} if payload == "{}" else json_value(payload),  # the common empty payload, no parse
            attempt=attempt,
            max_attempts=max_attempts,
            lease_token=lease_token,
            worker_id=worker_id,
            snoozes=snoozes,
            concurrency_key=concurrency_key,
            run_at=dt.datetime.fromisoformat(run_at_utc),  # aware: the text ends in +00:00
            trace_context=json_value(trace_context) if trace_context is not None else None,
            workflow_id=workflow_id,
            member_name=member_name,
            upstream={} if upstream is None else _upstream(upstream),
        )
        for (
            id, kind, queue, priority, payload, attempt, max_attempts, lease_token, snoozes, concurrency_key,
            claimed_epoch, run_at_utc, trace_context, workflow_id, member_name, upstream,
        ) in rows
    ]  # fmt: skip
    return jobs, dt.datetime.fromtimestamp(rows[0][_EPOCH], dt.timezone.utc) if rows else None


_EPOCH = ClaimRow._fields.index("claimed_epoch")


def _upstream(pairs: Any) -> dict[str, Any]:
    """A member's upstream values from the claim's [[name, value], ...] (None for a job of no workflow)."""
    if pairs is None:
        return {}
    return {name: value for name, value in (json.loads(pairs) if isinstance(pairs, str) else pairs)}


def take(
    queues: tuple[str, ...],
    limit: int,
    worker_id: str,
    lease_seconds: float,
    *,
    exclude: tuple[str, ...] = (),
    kind: str | None = None,
    floors: ClaimFloors | None = None,
    fair: tuple[str, ...] = (),
) -> list[ClaimedJob]:
    """Lock up to `limit` due rows (skipping rows others hold), mark them RUNNING, open attempts.

    With `floors`, each queue is read from its floor (or from the start, when a sweep is due), and
    the floors move with what the claim took. Not with `fair` kinds: their rows stand for other
    rows of the kind (fairness.substituted), so a floor past the last row taken could pass rows
    that were only tokens, and hide the kind's backlog until the next sweep.
    """
    if floors is None or kind is not None or fair:
        return run_claim(take_sql(queues, limit, exclude, kind, fair=fair), worker_id, lease_seconds)[0]
    sweep = floors.sweeping()
    # One queue whose last claim filled up reads its floor's priority only; if that falls short, the
    # rest of the room is claimed at once by the walk past it. Several queues always walk, so that no
    # queue's next priority waits behind another queue's backlog.
    walk = sweep or len(set(queues)) > 1 or floors.walking()
    jobs: list[ClaimedJob] = []
    while True:
        began, room = time.monotonic(), limit - len(jobs)
        sql, params = take_sql(queues, room, exclude, kind, floored=True, walk=walk)
        filled = tuple(floors.bound(p.queue, sweep=sweep)[p.part] if isinstance(p, Floor) else p for p in params)
        taken, at = run_claim((sql, filled), worker_id, lease_seconds)
        floors.claimed(
            [(job.queue, job.priority, job.run_at, job.id) for job in taken],
            at=at,
            sweep=sweep,
            began=began,
            exhausted=queues if len(taken) < room else (),
        )
        jobs += taken
        if walk or len(taken) == room:
            return jobs
        walk, sweep = True, False


def take_ids(ids: list[uuid.UUID], worker_id: str, lease_seconds: float) -> tuple[list[ClaimedJob], Any]:
    """Claim rows this transaction has picked and locked already."""
    if not ids:
        return [], None
    return run_claim((_TAKE_IDS_SQL, (ids,)), worker_id, lease_seconds)
