"""Every statement on a worker's path, sent by the real code with realistic parameters.

Each entry calls the function a worker calls (claim, renew, finish, ...) against the rows
that tables.load() made; explain.capture() records the plan of each statement it sends.
The calls run in a transaction that is rolled back, so one state serves every statement.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

import reliableq
from reliableq import queue as jobqueue
from reliableq import services
from reliableq.floors import ClaimFloors, RescueFloor
from reliableq.models import JobStatus, Outcome
from reliableq.options import JobOptions
from reliableq.queue import Finish, planguard
from reliableq.queue import pick as jobqueue_pick
from reliableq.queue import rescues as jobqueue_rescues
from reliableq.registry import Limits, Rate

from . import tables
from .explain import Plan, capture, quiet

WORKER = "w-plans"


@dataclass(frozen=True, slots=True, kw_only=True)
class Statement:
    """A call on the worker's path and what each statement it sends may cost, whatever the table holds."""

    name: str
    call: Callable[[], object]
    what: str
    buffers: int  # shared buffers hit + read, per statement
    rows: int  # rows of the job table (and, apart, of the attempt table) its scans may look at
    guard: Callable[[], bool] | None = None  # the planguard check that repairs its pick, if it has one


def _held(worker: str, n: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(job id, lease token) of `n` RUNNING jobs that `worker` holds under a live lease."""
    with quiet(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT id, lease_token FROM {tables.JOB}
             WHERE status = 'RUNNING' AND worker_id = %s AND lease_expires_at > now()
             ORDER BY id LIMIT %s
            """,
            [worker, n],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def claim() -> object:
    return jobqueue.claim(worker_id=WORKER, queues=("default",), limit=10, lease_seconds=30, rescue=False)


def claim_queues() -> object:
    return jobqueue.claim(worker_id=WORKER, queues=tables.QUEUES, limit=10, lease_seconds=30, rescue=False)


def claim_floored() -> object:
    """A worker's claims: the first reads from the start (a sweep) and sets the floor, the next starts there."""
    floors = ClaimFloors(sweep=3600.0)
    jobqueue.claim(worker_id=WORKER, queues=tables.QUEUES, limit=10, lease_seconds=30, rescue=False, floors=floors)
    return jobqueue.claim(
        worker_id=WORKER, queues=tables.QUEUES, limit=10, lease_seconds=30, rescue=False, floors=floors
    )


def claim_capped() -> object:
    """A worker with a capped kind: the other kinds, the cap's count, then the capped kind."""
    return jobqueue.claim(
        worker_id=WORKER, queues=tables.QUEUES, limit=10, lease_seconds=30, caps={tables.CAPPED: 2_000}, rescue=False
    )


def claim_keyed() -> object:
    """A worker with a per-key limit: the other kinds, then the kind's pick past saturated keys with
    the keys' locks, then the claim by id that counts their RUNNING rows."""
    return jobqueue.claim(
        worker_id=WORKER,
        queues=tables.QUEUES,
        limit=10,
        lease_seconds=30,
        limits={tables.CAPPED: Limits(per_key=1)},
        rescue=False,
    )


def claim_rated() -> object:
    """A worker with a rated kind: the other kinds, then one statement on a shard of its window."""
    return jobqueue.claim(
        worker_id=WORKER,
        queues=tables.QUEUES,
        limit=10,
        lease_seconds=30,
        limits={tables.CAPPED: Limits(rate=Rate(100_000, 60.0))},
        rescue=False,
    )


def rescue() -> object:
    return jobqueue_rescues.rescue_expired(("default",))


def rescue_floored() -> object:
    """The leader's rescues: the first reads the whole lease index (a sweep), the next from its floor."""
    floor = RescueFloor(sweep=3600.0)
    jobqueue.rescue(floor)
    return jobqueue.rescue(floor)


def rescue_queues() -> object:
    return jobqueue_rescues.rescue_expired(tables.QUEUES)


def renew() -> object:
    return jobqueue.renew(_held("w-1", 50), lease_seconds=30)


def finish() -> object:
    """A batch of 50 results: successes, retries and burials, and 5 whose lease is gone (so mark_lost too)."""
    held = _held("w-2", 50)
    statuses = [JobStatus.SUCCEEDED, JobStatus.PENDING, JobStatus.DEAD]
    finishes = [
        Finish(
            job_id=job_id,
            lease_token=uuid.uuid4() if i % 10 == 0 else token,
            status=statuses[i % 3],
            outcome=Outcome.SUCCEEDED if i % 3 == 0 else Outcome.FAILED_TRANSIENT,
            delay=5.0,
            keeps_return=i % 2 == 0,
            return_value={"i": i},
        )
        for i, (job_id, token) in enumerate(held)
    ]
    return jobqueue.finish(finishes)


def finish_members() -> object:
    """50 members of a 2,000-member fan-in finish in one batch, 10 of them DEAD: the workflows' hook
    counts their ends in the shards, cancels the report (it waits for them all) and fires nothing yet."""
    with quiet():
        wf = reliableq.workflow(name="plans")
        loads = [wf.add("demo.noop", {}, name=f"load-{i}", queue="wf-plans") for i in range(2_000)]
        wf.add("demo.noop", {}, name="report", after=loads, queue="wf-plans")
        wf.on("failure", "demo.noop", {}, queue="wf-plans")
        wf.enqueue()
        claimed, _ = jobqueue.claim(worker_id="w-wf", queues=("wf-plans",), limit=50, lease_seconds=30)
    finishes = [
        Finish(
            job_id=job.id,
            lease_token=job.lease_token,
            status=JobStatus.DEAD if i % 5 == 0 else JobStatus.SUCCEEDED,
            outcome=Outcome.FAILED_PERMANENT if i % 5 == 0 else Outcome.SUCCEEDED,
            keeps_return=True,
            workflow=True,
        )
        for i, job in enumerate(claimed)
    ]
    return jobqueue.finish(finishes)


def cascade() -> object:
    """One step of a cancel handed on: a 1,000-member chain whose first member died, whose end cancelled
    WALK members and handed the next on; the step cancels as many again and hands the next on."""
    with quiet():
        wf = reliableq.workflow(name="plans chain")
        previous = wf.add("demo.noop", {}, name="m0", queue="wf-plans-chain")
        for i in range(1, 1_000):
            previous = wf.add("demo.noop", {}, name=f"m{i}", after=[previous], queue="wf-plans-chain")
        wf.enqueue()
        [head], _ = jobqueue.claim(worker_id="w-wf", queues=("wf-plans-chain",), limit=1, lease_seconds=30)
        jobqueue.finish([Finish(job_id=head.id, lease_token=head.lease_token, status=JobStatus.DEAD,
                                outcome=Outcome.FAILED_PERMANENT, workflow=True)])  # fmt: skip
    return jobqueue.cascade()


def mark_lost() -> object:
    return jobqueue.mark_lost(_held("w-3", 50), reason="lease lost: found by heartbeat, another owner has the job")


def release_unacknowledged() -> object:
    known = [token for _, token in _held("w-4", 80)]  # it holds 87; the rest are "unacknowledged"
    return jobqueue.release_unacknowledged(worker_id="w-4", known=known)


def schedule() -> object:
    """The scheduler's insert of a slot's job: the first round creates the job, the next finds it."""
    key = f"schedule:{uuid.uuid4()}:2030-01-01T00:00:00+00:00"
    services.submit(tables.KIND, {"scheduled_for": "soon"}, JobOptions(dedupe_key=key))
    return services.submit(tables.KIND, {"scheduled_for": "soon"}, JobOptions(dedupe_key=key))


class _OneBatch(Exception):
    pass


def prune() -> object:
    """One batch of retention (1,000 finished jobs older than a day, with their attempts)."""

    def stop(deleted: int) -> None:
        raise _OneBatch

    try:
        services.prune(older_than=dt.timedelta(days=1), batch_size=1_000, progress=stop)
    except _OneBatch:
        pass
    return None


def guard_claim(queues: tuple[str, ...] = ("default",)) -> bool:
    """What claim(rescue=True) runs first: analyze if the pick would leave the due index."""
    sql, params = jobqueue_pick.picked_sql(queues, 10, (), None)
    return planguard.keep_index(sql, params, table=tables.JOB, index=jobqueue.DUE_INDEX)


def guard_prune() -> bool:
    """What prune() runs first: the guard, on prune's own pick (no batch is run)."""
    checked: list[bool] = []
    real = planguard.keep_index

    def check_then_stop(*args: Any, **kwargs: Any) -> bool:
        checked.append(real(*args, **kwargs))
        raise _OneBatch

    planguard.keep_index = check_then_stop
    try:
        services.prune(older_than=dt.timedelta(days=1), batch_size=1_000)
    except _OneBatch:
        pass
    finally:
        planguard.keep_index = real
    return checked[0]


# Per statement: ~25 buffers for each job row a statement changes (nine indexes, none of them
# HOT-friendly), ~12 for each attempt row. Only the statements that look for RUNNING jobs by
# something else than their id (the rescue, the release, the cap's count) may walk the RUNNING
# rows (about 1,000 here: a fleet's worth, whatever the table holds); none may walk the backlog
# or the history.
STATEMENTS = [
    Statement(
        name="claim", call=claim, what="claim 10 due jobs of one queue", buffers=800, rows=100, guard=guard_claim
    ),
    Statement(
        name="claim_queues",
        call=claim_queues,
        what="claim 10 due jobs of two queues",
        buffers=800,
        rows=200,
        guard=lambda: guard_claim(tables.QUEUES),
    ),
    Statement(
        name="claim_floored",
        call=claim_floored,
        what="claim 10 due jobs of two queues twice: from the start, then from the floor",
        buffers=800,
        rows=200,
        guard=lambda: guard_claim(tables.QUEUES),
    ),
    Statement(
        name="claim_capped",
        call=claim_capped,
        what="claim 10 with a capped kind: the others, the kind's RUNNING count, then the kind",
        buffers=1_500,
        rows=2_500,
        guard=lambda: guard_claim(tables.QUEUES),
    ),
    Statement(
        name="claim_keyed",
        call=claim_keyed,
        what="claim 10 with a per-key limit: the others, then the kind past saturated keys",
        buffers=3_000,
        rows=2_500,
        guard=lambda: guard_claim(tables.QUEUES),
    ),
    Statement(
        name="claim_rated",
        call=claim_rated,
        what="claim 10 with a rated kind: the others, then one statement on a shard of its window",
        buffers=1_500,
        rows=2_500,
        guard=lambda: guard_claim(tables.QUEUES),
    ),
    Statement(name="rescue", call=rescue, what="rescue 100 expired leases of one queue", buffers=8_000, rows=2_500),
    Statement(
        name="rescue_floored",
        call=rescue_floored,
        what="the leader's rescue of 100 expired leases twice: all of the lease index, then from its floor",
        buffers=8_000,
        rows=2_500,
    ),
    Statement(
        name="rescue_queues",
        call=rescue_queues,
        what="rescue 100 expired leases of two queues",
        buffers=8_000,
        rows=2_500,
    ),
    Statement(name="renew", call=renew, what="renew 50 leases", buffers=3_000, rows=500),
    Statement(
        name="finish",
        call=finish,
        what="finish 50 attempts (5 of them lost), keep 25 return values",
        buffers=4_000,
        rows=500,
    ),
    Statement(
        name="finish_members",
        call=finish_members,
        what="finish 50 members of a 2,000-member fan-in (10 DEAD): count, cancel, fire",
        buffers=8_000,
        rows=500,
    ),
    Statement(
        name="cascade",
        call=cascade,
        what="one step of a chain's cancel handed on: cancel 200 members and count their ends",
        buffers=20_000,
        rows=2_500,  # about eight probes of a job row per member cancelled (WALK of them), whatever the table
    ),
    Statement(name="mark_lost", call=mark_lost, what="mark 50 attempts lost", buffers=2_500, rows=500),
    Statement(
        name="release_unacknowledged",
        call=release_unacknowledged,
        what="release 7 claims whose commit was not acknowledged",
        buffers=3_000,
        rows=2_500,
    ),
    Statement(
        name="schedule",
        call=schedule,
        what="the scheduler's insert (submit with a dedupe key), twice",
        buffers=100,
        rows=10,
    ),
    Statement(
        name="prune",
        call=prune,
        what="one retention batch of 1,000 finished jobs",
        buffers=20_000,
        rows=3_000,
        guard=guard_prune,
    ),
]


def measure(statement: Statement, *, generic: bool = False) -> list[Plan]:
    """Run one call with every statement it sends explained (`generic`: the plans made without the
    parameters' values, which a prepared statement may settle on); roll all of it back.

    The guard is kept out (prune calls it first): what is measured is the statements as the
    statistics of the moment would run them.
    """
    real = planguard.keep_index
    planguard.keep_index = lambda *args, **kwargs: False
    try:
        with transaction.atomic():
            with capture(generic=generic) as captured:
                statement.call()
            transaction.set_rollback(True)
    finally:
        planguard.keep_index = real
    return captured.plans
