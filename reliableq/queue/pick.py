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

from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from ..floors import ClaimFloors
from ..models import Job
from . import db, door, fairness, functions, planguard
from .makers import maker
from .records import ClaimedJob
from .sql import ATTEMPT, DUE_INDEX, JOB, QUEUE, S, compile_sql, filter_only, json_value


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
    "claimed_epoch": "extract(epoch FROM statement_timestamp())::float8",
    "run_at_utc": """to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')""",
    "trace_context": "trace_context", "workflow_id": "workflow_id", "member_name": "member_name",
    "upstream": f"CASE WHEN on_upstream_failure <> '' THEN {functions.UPSTREAM}(id) END",
}  # fmt: skip
if tuple(_CLAIM_COLUMNS) != ClaimRow._fields:
    raise AssertionError("_CLAIM_COLUMNS must name ClaimRow's fields, in order")
_CLAIM_SELECT = ", ".join(f"{expression} AS {name}" for name, expression in _CLAIM_COLUMNS.items())


def claim_sql(pick: str = "", *, before: str = "", beside: str = "") -> str:
    """The claim statement around a pick (a query of due, locked job ids): mark RUNNING, open attempts.

    Composed by parameters: `pick` becomes the `picked` CTE; or `before` gives CTEs of its own that
    end with one named `picked` (a rated claim's window, then its pick). `beside` is a CTE that runs
    in the same statement after `moved` (the jobs claimed: a rated claim's record of its starts),
    ending in a comma. The door (reliableq.queue.door) makes the statement.
    Time is in the SQL (statement_timestamp(), now()), never in the parameters, so a cached
    statement is as fresh as a new one.
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
                       lease_expires_at = statement_timestamp() + make_interval(secs => %s),
                       worker_id = %s,
                       updated_at = statement_timestamp()
                 WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
             RETURNING j.id, j.kind, j.queue, j.priority, j.payload, j.attempts,
                       j.max_attempts, j.lease_token, j.run_at, j.snoozes, j.concurrency_key, j.trace_context,
                       j.workflow_id, j.member_name, j.on_upstream_failure""",
        change=door.Change.STARTED,
        tail=f""",{beside}
            opened AS (
                INSERT INTO {ATTEMPT} (job_id, number, worker_id, lease_token, started_at, outcome, error)
                SELECT id, attempts, %s, lease_token, statement_timestamp(), {S.RUNNING}, '' FROM moved
            )
            SELECT {_CLAIM_SELECT}
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
) -> tuple[str, tuple[Any, ...]]:
    """The claim statement for these queues and this limit, compiled by the ORM once and then reused."""
    pick, pick_params = picked_sql(queues, limit, exclude, kind, floored=floored, fair=fair)
    return claim_sql(pick), pick_params


# A queue state row `q` that pauses its queue now, by database time.
PAUSED_NOW = "q.paused_at IS NOT NULL AND (q.paused_until IS NULL OR q.paused_until > now())"


# Rows already picked and locked by this transaction (a per-key claim), claimed by id. The pick
# and this take are two statements with the keys' lock waits between them: a pause that commits
# in a wait is seen here (a fresh snapshot), and the rows of its queue are left PENDING.
_TAKE_IDS_SQL = claim_sql(
    f"SELECT p.id FROM unnest(%s::uuid[]) AS p(id) JOIN {JOB} pj ON pj.id = p.id"
    f" WHERE NOT EXISTS (SELECT 1 FROM {QUEUE} q WHERE q.name = pj.queue AND {PAUSED_NOW})"
)


def paused(queue: str) -> RawSQL:
    """True while `queue` is paused, by database time. It names no row of the job table, so the
    planner checks it once per statement (a one-time filter), not once per row."""
    return RawSQL(
        f"EXISTS (SELECT 1 FROM {QUEUE} q WHERE q.name = %s AND {PAUSED_NOW})",
        (queue,),
        output_field=BooleanField(),
    )


# True for a row whose concurrency_key already has N RUNNING jobs of its kind (parameters: N, N).
KEY_SATURATED = f"""(SELECT count(*) FROM (SELECT 1 FROM {JOB} r WHERE r.status = {S.RUNNING}
              AND r.kind = {JOB}.kind AND r.concurrency_key = {JOB}.concurrency_key LIMIT %s) AS running) >= %s"""


def key_saturated(per_key: int) -> RawSQL:
    """True for a row whose concurrency_key already has `per_key` RUNNING jobs of its kind (a hint:
    read without the key's lock; _pick_per_key decides under it)."""
    return RawSQL(KEY_SATURATED, (per_key, per_key), output_field=BooleanField())


@dataclass(frozen=True, slots=True)
class Floor:
    """A parameter of a floored pick, filled in at each claim: a queue's floor (priority, run_at, id)."""

    queue: str
    part: int


def _floor_condition(queue: str) -> RawSQL:
    """Rows at or past the queue's floor. A plain condition, so the due index's scan starts there
    (after `queue =`, the index's next columns are priority, run_at and id: a row comparison bounds them)."""
    return RawSQL(
        "(priority, run_at, id) >= ((%s)::integer, (%s)::timestamptz, (%s)::uuid)",
        (Floor(queue, 0), Floor(queue, 1), Floor(queue, 2)),
        output_field=BooleanField(),
    )


def _since_condition(queue: str) -> RawSQL:
    """Rows due since the queue's since (ClaimFloors.bound): run_at is in the due index, so rows
    before it are passed over in the index, without a visit to the table."""
    return RawSQL("run_at >= (%s)::timestamptz", (Floor(queue, 3),), output_field=BooleanField())


# Job.objects.due() with the status as a literal: a prepared claim's generic plan, made without the
# parameters' values, can then still prove the due index's predicate and read it.
PENDING_DUE = RawSQL(
    f"{JOB}.status = {S.PENDING} AND {JOB}.run_at <= statement_timestamp()", (), output_field=BooleanField()
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
    its floor, a parameter (Floor) the claim fills in (reliableq.floors). Rows of the `fair` kinds
    stand for as many of those kinds' due jobs in turn order (fairness.substituted).
    """
    if not queues:
        raise ValueError("A claim needs at least one queue.")
    columns = ["id", "priority", "run_at"] + (["concurrency_key"] if per_key else [])
    if fair:
        columns += ["kind", "queue", "fair_seq"]
    arms = []
    for queue in dict.fromkeys(queues):
        due = Job.objects.filter(PENDING_DUE).filter(queue=queue).exclude(paused(queue))
        if floored:
            due = due.filter(_floor_condition(queue))
            if exclude:  # the other kinds' backlog is never taken here: read only rows due since
                due = due.filter(_since_condition(queue))
        if exclude:
            due = due.exclude(kind__in=list(exclude))
        if kind is not None:
            due = due.filter(filter_only("kind = %s", [kind]))
        if per_key:
            due = due.exclude(key_saturated(per_key))
        ordered = due.order_by("priority", "run_at", "id").values(*columns)
        arms.append(ordered.select_for_update(skip_locked=True)[:limit])
    with db.atomic():  # the ORM compiles FOR UPDATE only inside a transaction; nothing is sent here
        compiled = [compile_sql(arm) for arm in arms]
    picked = ", ".join(columns) if fair else "id, concurrency_key" if per_key else "id"
    if len(compiled) == 1:
        [(sql, params)] = compiled
        main = f"SELECT {picked} FROM ({sql}) AS due"
    else:
        union = " UNION ALL ".join(f"SELECT * FROM ({sql}) AS due_{n}" for n, (sql, _) in enumerate(compiled))
        params = tuple(p for _, arm_params in compiled for p in arm_params)
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
    """Run a claim statement; return the jobs it took and its database time (None if it took none)."""
    sql, picked_params = statement
    rows = db.fetch(sql, (*picked_params, float(lease_seconds), worker_id, worker_id))
    claimed = [ClaimRow._make(row) for row in rows]
    jobs = [
        _claimed(
            id=row.id,
            kind=row.kind,
            queue=row.queue,
            priority=row.priority,
            payload={} if row.payload == "{}" else json_value(row.payload),  # the common empty payload, no parse
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            lease_token=row.lease_token,
            worker_id=worker_id,
            snoozes=row.snoozes,
            concurrency_key=row.concurrency_key,
            run_at=dt.datetime.fromisoformat(row.run_at_utc),  # aware: the text ends in +00:00
            trace_context=json_value(row.trace_context) if row.trace_context is not None else None,
            workflow_id=row.workflow_id,
            member_name=row.member_name,
            upstream={} if row.upstream is None else _upstream(row.upstream),
        )
        for row in claimed
    ]
    return jobs, dt.datetime.fromtimestamp(claimed[0].claimed_epoch, dt.timezone.utc) if claimed else None


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
        jobs, _ = run_claim(take_sql(queues, limit, exclude, kind, fair=fair), worker_id, lease_seconds)
        return jobs
    sweep = floors.sweeping()
    began = time.monotonic()
    sql, params = take_sql(queues, limit, exclude, kind, floored=True)
    filled = tuple(floors.bound(p.queue, sweep=sweep)[p.part] if isinstance(p, Floor) else p for p in params)
    jobs, at = run_claim((sql, filled), worker_id, lease_seconds)
    floors.claimed(
        [(job.queue, job.priority, job.run_at, job.id) for job in jobs],
        at=at,
        sweep=sweep,
        began=began,
        exhausted=queues if len(jobs) < limit else (),
    )
    return jobs


def take_ids(ids: list[uuid.UUID], worker_id: str, lease_seconds: float) -> tuple[list[ClaimedJob], Any]:
    """Claim rows this transaction has picked and locked already."""
    if not ids:
        return [], None
    return run_claim((_TAKE_IDS_SQL, (ids,)), worker_id, lease_seconds)
