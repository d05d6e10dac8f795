"""Claim and rescue floors: under a held snapshot, claims and rescues stop walking dead index entries.

First the failure: while another session holds a snapshot, every claimed job leaves its PENDING
version in the due index, and a claim that reads the index from its start checks each of them
against the table again (no scan may mark them dead while the snapshot lives). Then the floor
that closes it, and what the floor cannot know: a job that becomes due below it waits for the
next sweep.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext

import reliableq
from reliableq import queue as jobqueue
from reliableq import services
from reliableq.conf import queue_alias
from reliableq.floors import OTHER_KINDS, ClaimFloors, RescueFloor
from reliableq.models import Job, JobStatus
from reliableq.queue import Finish, db
from reliableq.queue import pick as jobqueue_pick
from reliableq.registry import Limits, Rate

from .helpers import expire, raw_connect

pytestmark = pytest.mark.django_db(transaction=True)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def claim(floors: ClaimFloors | None, limit: int = 10, queues: tuple[str, ...] = ("default",)) -> list:
    jobs, _ = jobqueue.claim(
        worker_id="w-floor", queues=queues, limit=limit, lease_seconds=30, rescue=False, floors=floors
    )
    return jobs


def finish(jobs: list) -> None:
    jobqueue.finish(
        [Finish(job_id=j.id, lease_token=j.lease_token, status="SUCCEEDED", outcome="SUCCEEDED") for j in jobs]
    )


def pick_buffers(floors: ClaimFloors | None) -> int:
    """Shared buffers that the claim's pick of 10 rows touches (EXPLAIN ANALYZE, rolled back)."""
    picked, params = jobqueue_pick.picked_sql(("default",), 10, (), None, floored=floors is not None)
    if floors is not None:
        params = tuple(
            floors.bound(p.queue, sweep=False)[p.part] if isinstance(p, jobqueue_pick.Floor) else p for p in params
        )
    return explain_buffers(picked, params)


def explain_buffers(picked: str, params: tuple) -> int:
    with db.atomic():
        with db.cursor() as cursor:
            # The due index, as the workers' picks read it (the plan guard keeps them on it): on a
            # table this small the planner may prefer to read it all, which would hide the walk.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            # Nor sort another index's rows: with every row of one kind, a pick that excludes it
            # is estimated to find nothing, and any index would do.
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {picked}", params[: picked.count("%s")])
            document = cursor.fetchone()[0]
        db.connection().set_rollback(True)
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    assert jobqueue.DUE_INDEX in json.dumps(plan), plan
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def test_under_a_held_snapshot_a_claim_from_the_start_rereads_every_claimed_row_and_a_floored_one_does_not() -> None:
    clock = Clock()
    floors = ClaimFloors(clock=clock)
    services.enqueue_many("demo.noop", [{}] * 3000)
    Job.objects.update(run_at=F("run_at") - dt.timedelta(seconds=60))  # a backlog, due a minute ago
    # The update left each job's first version in the due index, a minute later than the backlog:
    # above the floor the claims will leave, where the floored pick reads. They are dead to every
    # snapshot; whether an index scan or autovacuum had cleared them when the pick ran depended on
    # timing (under CI's load the floored pick read 2,707 buffers through them). Cleared here.
    with db.cursor() as cursor:
        cursor.execute("VACUUM reliableq_job")
    holder = raw_connect()
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class")  # the snapshot is taken: vacuum now keeps every version
        taken = 0
        while jobs := claim(floors, limit=100):
            finish(jobs)
            taken += len(jobs)
            clock.now += 0.01  # no sweep after the first claim
        assert taken == 3000
        services.enqueue_many("demo.noop", [{}] * 10)
        with db.cursor() as cursor:  # statistics as the plan guard leaves them: the picks read the due index
            cursor.execute("ANALYZE reliableq_job")

        from_start, floored = pick_buffers(None), pick_buffers(floors)
        # The failure: 3,000 dead PENDING versions, each checked against the table again (the heap
        # pages they sit on, and the index pages that hold them).
        assert from_start > 1500, from_start
        # The floor: the scan starts where this worker's claims reached, past all of them: what is
        # left is the pick's own cost (the index's descent, ten rows locked, the paused-queue check).
        assert floored < 100 and 20 * floored < from_start, (floored, from_start)
        assert len(claim(floors)) == 10
    finally:
        holder.close()


def test_a_job_due_below_the_floor_is_claimed_by_the_next_sweep() -> None:
    clock = Clock()
    floors = ClaimFloors(clock=clock, slack=1.0, sweep=2.0)
    first = reliableq.enqueue("demo.noop", {"n": 1})
    assert [j.id for j in claim(floors)] == [first.pk]  # the first claim is a sweep; it sets the floor

    # A job enqueued by a transaction that began long before (its run_at is the transaction's
    # start), and one with a better priority than the floor's: both below the floor.
    late = reliableq.enqueue("demo.noop", {"n": 2})
    Job.objects.filter(pk=late.pk).update(run_at=F("run_at") - dt.timedelta(seconds=30))
    urgent = reliableq.enqueue("demo.noop", {"n": 3}, priority=-5)
    clock.now = 1.0
    assert claim(floors) == []  # the floor hides them (the hint's known cost)
    clock.now = 2.5  # a sweep is due: every claimer reads its queues from the start now and then
    assert [j.id for j in claim(floors)] == [urgent.pk, late.pk]


def test_within_the_slack_a_late_commit_is_claimed_at_once() -> None:
    clock = Clock()
    floors = ClaimFloors(clock=clock, slack=1.0, sweep=60.0)
    claim_first = reliableq.enqueue("demo.noop", {"n": 1})
    assert [j.id for j in claim(floors)] == [claim_first.pk]
    late = reliableq.enqueue("demo.noop", {"n": 2})
    Job.objects.filter(pk=late.pk).update(run_at=F("run_at") - dt.timedelta(seconds=0.5))
    clock.now = 1.0
    assert [j.id for j in claim(floors)] == [late.pk]


def test_the_rescue_reads_from_its_floor_and_sweeps_now_and_then() -> None:
    clock = Clock()
    floor = RescueFloor(clock=clock, margin=10.0, sweep=60.0)
    services.enqueue_many("demo.noop", [{}] * 3)
    a, b, c = claim(None)
    expire(a.id)
    assert [r.job_id for r in jobqueue.rescue(floor)] == [a.id]  # the first rescue reads it all

    # A lease that ran out long before the last complete rescue (its row was locked by its owner
    # while that rescue passed, say): below the floor, so left for the sweep.
    expire(b.id, seconds=3600)
    expire(c.id)  # an ordinary expiry: at the floor's front
    clock.now = 1.0
    assert [r.job_id for r in jobqueue.rescue(floor)] == [c.id]
    clock.now = 61.0
    assert [r.job_id for r in jobqueue.rescue(floor)] == [b.id]
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 3


def test_a_sweep_under_a_held_snapshot_waits_in_proportion_to_what_it_cost() -> None:
    clock = Clock()
    floors = ClaimFloors(clock=clock, sweep=2.0)
    floors.claimed([], at=None, sweep=True, began=0.0)
    assert not floors.sweeping()
    clock.now = 2.0
    assert floors.sweeping()
    began, clock.now = clock.now, clock.now + 0.5  # a sweep that took half a second
    floors.claimed([], at=None, sweep=True, began=began)
    clock.now = 11.9
    assert not floors.sweeping()  # the next one waits 20 x 0.5 s: at most 5% of the worker's time
    clock.now = 12.6
    assert floors.sweeping()


# -- a claim that excludes kinds: their backlog never moves its floor -------------------------------

RATED = {"demo.noop": Limits(rate=Rate.parse("1000000/m"))}  # far above what these claims start


def claim_limited(floors: ClaimFloors, limit: int = 10) -> list:
    jobs, _ = jobqueue.claim(
        worker_id="w-floor",
        queues=("default",),
        limit=limit,
        lease_seconds=30,
        limits=RATED,
        rescue=False,
        floors=floors,
    )
    return jobs


def test_a_claim_excluding_a_limited_kind_reads_past_its_backlog_only_from_its_since() -> None:
    clock = Clock()
    floors = ClaimFloors(clock=clock, slack=1.0, sweep=60.0)
    services.enqueue_many("demo.noop", [{}] * 3000)
    Job.objects.update(run_at=F("run_at") - dt.timedelta(seconds=60))  # the limited kind's backlog
    with db.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE reliableq_job")
    # The first claim reads the queue from the start for the other kinds, through the whole backlog,
    # and takes 10 of the rated kind: the database time of that start is this worker's last claim.
    assert len(claim_limited(floors)) == 10
    clock.now = 1.0
    assert len(claim_limited(floors)) == 10  # the other kinds' pick found none: its since is set

    def excluding_pick_buffers(since_of: ClaimFloors | None) -> int:
        picked, params = jobqueue_pick.picked_sql(("default",), 10, ("demo.noop",), None, floored=True)
        bound = (since_of or ClaimFloors()).bound
        params = tuple(bound(p.queue, sweep=False)[p.part] if isinstance(p, jobqueue_pick.Floor) else p for p in params)
        return explain_buffers(picked, params)

    from_start, since = excluding_pick_buffers(None), excluding_pick_buffers(floors)
    # Every row of the backlog checked against the table for its kind, against the index's own pages.
    assert from_start > 1500, from_start
    assert since < 100 and 20 * since < from_start, (since, from_start)

    # What turns due now is above the since: taken at once. What is due from before it (an old run_at),
    # like a row below a floor, waits for the next sweep.
    fresh = reliableq.enqueue("demo.three_steps", {"n": 1})
    old = reliableq.enqueue("demo.three_steps", {"n": 2})
    Job.objects.filter(pk=old.pk).update(run_at=F("run_at") - dt.timedelta(seconds=30))
    clock.now = 2.0
    assert [j.id for j in claim_limited(floors) if j.kind != "demo.noop"] == [fresh.pk]
    clock.now = 61.0
    assert [j.id for j in claim_limited(floors) if j.kind != "demo.noop"] == [old.pk]


def test_a_claim_after_a_full_one_reads_the_floors_priority_then_walks_past_it_at_once() -> None:
    """One queue whose last claim filled up reads its floor's priority only (the cheaper statement);
    when that falls short, the same claim takes the rest of its room from the next priority."""
    first = services.enqueue_many("demo.noop", [{}] * 4, priority=0)
    later = services.enqueue_many("demo.noop", [{}] * 3, priority=5)
    floors = ClaimFloors(clock=Clock())  # the clock stands still: the first claim is the only sweep
    assert floors.walking()  # no claim yet

    took = claim(floors, limit=3)
    assert {j.priority for j in took} == {0} and len(took) == 3
    assert not floors.walking()  # it filled up

    with CaptureQueriesContext(connections[queue_alias()]) as sent:
        took = claim(floors, limit=3)  # one row of priority 0 is left: then the walk, in the same claim
    assert [j.priority for j in took] == [0, 5, 5]
    assert ["WITH RECURSIVE" in q["sql"] for q in sent.captured_queries] == [False, True]  # the floor's, the walk
    assert not floors.walking()
    took = claim(floors, limit=3)
    assert [j.priority for j in took] == [5] and floors.walking()
    assert Job.objects.filter(id__in=first + later, status=JobStatus.RUNNING).count() == 7


# -- a limited kind with nothing due: refills pass over it for a while ------------------------------


def claim_refill(floors: ClaimFloors, limits: dict[str, Limits], *, refill: bool) -> tuple[list, list[str]]:
    """A claim's jobs and the statements it sent."""
    with CaptureQueriesContext(connections[queue_alias()]) as sent:
        jobs, _ = jobqueue.claim(
            worker_id="w-floor",
            queues=("default",),
            limit=10,
            lease_seconds=30,
            limits=limits,
            rescue=False,
            floors=floors,
            refill=refill,
        )
    return jobs, [query["sql"] for query in sent.captured_queries]


def test_a_refill_passes_over_a_limited_kind_that_had_nothing_due_until_a_wake_or_a_while() -> None:
    clock = Clock()
    floors = ClaimFloors(clock=clock, sweep=60.0, idle=1.0)
    jobs, sent = claim_refill(floors, RATED, refill=False)  # nothing due: every kind is asked
    assert jobs == [] and any("rate_window" in sql for sql in sent)
    assert floors.idle("demo.noop") and floors.idle(OTHER_KINDS)
    assert claim_refill(floors, RATED, refill=True) == ([], [])  # a refill asks nobody

    # A job of another kind enqueued now: the refills pass over it; the claim after a wake takes it.
    other = reliableq.enqueue("demo.three_steps", {"n": 1})
    assert claim_refill(floors, RATED, refill=True)[0] == []
    jobs, sent = claim_refill(floors, RATED, refill=False)
    assert [job.id for job in jobs] == [other.id] and not floors.idle(OTHER_KINDS)
    jobs, sent = claim_refill(floors, RATED, refill=True)  # the others asked again; the rated kind not
    assert jobs == [] and len(sent) == 1 and "rate_window" not in sent[0], sent

    # A job of the kind enqueued now: the refills still pass over it; the claim after a wake takes it.
    first = reliableq.enqueue("demo.noop", {})
    assert claim_refill(floors, RATED, refill=True)[0] == []
    assert [job.id for job in claim_refill(floors, RATED, refill=False)[0]] == [first.id]
    assert not floors.idle("demo.noop")  # it took one: asked by the next refill too
    claim_refill(floors, RATED, refill=True)  # took none, none due: passed over again
    assert floors.idle("demo.noop")
    # Or once the while is over, the next refill asks it again.
    second = reliableq.enqueue("demo.noop", {})
    clock.now = 1.5
    assert [job.id for job in claim_refill(floors, RATED, refill=True)[0]] == [second.id]


def test_a_limited_kind_with_due_jobs_but_no_room_is_never_passed_over() -> None:
    """A kind at its cap (or its rate, or its keys all saturated) took none, with jobs due: each refill
    asks it, so that the slot a finish frees is taken at once."""
    floors = ClaimFloors(clock=Clock(), sweep=60.0, idle=1.0)
    capped = {"demo.noop": Limits(max_running=1)}
    services.enqueue_many("demo.noop", [{}] * 2)
    assert len(claim_refill(floors, capped, refill=False)[0]) == 1
    jobs, sent = claim_refill(floors, capped, refill=True)
    assert jobs == [] and any("pg_advisory_xact_lock" in sql for sql in sent)
    assert not floors.idle("demo.noop")
    saturated = {"demo.noop": Limits(rate=Rate.parse("1/h"))}
    reliableq.enqueue("demo.noop", {})
    assert len(claim_refill(floors, saturated, refill=False)[0]) == 1  # the hour's one start
    assert claim_refill(floors, saturated, refill=True)[0] == []  # one more due, no room
    assert not floors.idle("demo.noop")
