"""Fair share in the claim: a fair kind's claims take due jobs in turn among their fair_keys.

The turns are decided by the database (reliableq.queue.fairness): these tests drive the real
statements, from several connections where the fleet matters, and read the order jobs were
claimed in.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings

import reliableq
from reliableq import queue as jobqueue
from reliableq import registry, services
from reliableq.errors import InvalidJob
from reliableq.models import Job, JobStatus, Outcome
from reliableq.options import JobOptions
from reliableq.queue import ClaimedJob, Finish, db
from reliableq.registry import Limits
from reliableq.services import NewJob
from tests.support import late_by, turns_left_behind

from .helpers import spawn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fair_kinds")]


def claim(
    limit: int,
    *,
    worker_id: str = "w-test",
    queues: tuple[str, ...] = ("default",),
    rescue: bool = False,
    limits: dict[str, Limits] | None = None,
) -> list[ClaimedJob]:
    """A claim by a worker that knows every registered kind (or only `limits`' kinds)."""
    known = registry.limits() if limits is None else limits
    jobs, _ = jobqueue.claim(
        worker_id=worker_id, queues=queues, limit=limit, lease_seconds=30, limits=known, rescue=rescue
    )
    return jobs


def keys_of(jobs: Sequence[ClaimedJob]) -> list[str | None]:
    """The claimed jobs' fair_keys in turn order (a claim returns its jobs by priority and age)."""
    rows = Job.objects.filter(pk__in=[j.id for j in jobs]).order_by("priority", "fair_seq", "id")
    return list(rows.values_list("fair_key", flat=True))


def row_lock_waiters() -> int:
    """Backends of the test database waiting for a row's or an advisory lock now (not for the table's
    file to grow, which any INSERT may wait for)."""
    with db.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            " AND wait_event IN ('transactionid', 'tuple', 'advisory')"
        )
        return int(cursor.fetchone()[0])


def finish(jobs: Sequence[ClaimedJob], status: str = JobStatus.SUCCEEDED, outcome: str = Outcome.SUCCEEDED) -> None:
    jobqueue.finish([Finish(job_id=j.id, lease_token=j.lease_token, status=status, outcome=outcome) for j in jobs])


def test_a_late_tenant_is_served_in_the_next_claim_not_after_the_backlog() -> None:
    reliableq.enqueue_many("test.fair", [{}] * 200, fair_key="big")
    for tenant in "abcde":
        for _ in range(4):
            reliableq.enqueue("test.fair", {}, fair_key=tenant)

    first = claim(6)
    assert Counter(keys_of(first)) == Counter(["big", *"abcde"])  # each key's first turn
    assert Counter(keys_of(claim(12))) == Counter({"big": 2, **dict.fromkeys("abcde", 2)})
    assert Counter(keys_of(claim(100))) == Counter({"big": 95, **dict.fromkeys("abcde", 1)})  # work-conserving


def test_rotation_continues_from_one_claimer_to_the_next() -> None:
    keys = [f"k{n}" for n in range(10)]
    for key in keys:
        reliableq.enqueue_many("test.fair", [{}] * 5, fair_key=key)

    order: list[str | None] = []
    for n in range(17):  # three at a time, alternating between two workers: 51 slots for 50 jobs
        order += keys_of(claim(3, worker_id=f"w-{n % 2}"))
    # Each round of ten starts has every key once: the second worker went on where the first stopped,
    # never back to k0. (Keys tie within a round; ids made in one millisecond order them at random.)
    assert [set(order[n : n + 10]) for n in range(0, 50, 10)] == [set(keys)] * 5


def test_concurrent_claimers_share_the_turns_and_never_take_a_job_twice() -> None:
    keys = [f"t{n}" for n in range(6)]
    reliableq.enqueue_many("test.fair", [{}] * 300, fair_key="flood")
    for key in keys:
        reliableq.enqueue_many("test.fair", [{}] * 10, fair_key=key)
    start = threading.Barrier(8)
    # Each claim's call and return on one counter: a claim that returned (committed) before another
    # was called came before it, whatever the machine's load; others overlapped, as far as we know.
    ticks = itertools.count()
    ledger = threading.Lock()
    claims: list[tuple[int, int, list[Any]]] = []  # (called, returned, job ids)

    def claimer(n: int) -> int:
        start.wait()
        took = 0
        while True:
            with ledger:
                called = next(ticks)
            # A worker that knows only the fair kind: the limited kinds' own locks (a cap's) are not fairness's.
            jobs = claim(2, worker_id=f"w-{n}", limits={"test.fair": Limits(fair=True)})
            with ledger:
                claims.append((called, next(ticks), [j.id for j in jobs]))
            if not jobs:
                return took
            took += len(jobs)

    waits: list[int] = []
    done = threading.Event()

    def watch() -> None:  # no row every claim writes: no claimer ever waits for another's row or key
        while not done.is_set() or len(waits) <= 10:  # enough samples, however little CPU it got
            waits.append(row_lock_waiters())

    watcher = spawn(watch)
    futures = [spawn(claimer, n) for n in range(8)]
    assert sum(f.result(timeout=60) for f in futures) == 360
    done.set()
    watcher.result(timeout=10)
    # A row every claim wrote would show a waiter in most samples (a capped kind's lock: about half of
    # them here); a lone wait on a row two claims both reached is not a hot row.
    assert sum(1 for w in waits if w) <= len(waits) / 20, waits
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 360
    # The rotation as turns: each job's place in (priority, fair_seq, id) order, fixed at enqueue.
    ranked = Job.objects.order_by("priority", "fair_seq", "id").values_list("id", "fair_key")
    rank = {pk: n for n, (pk, _) in enumerate(ranked)}
    assert late_by([key for _, key in ranked], rounds=10) == 0  # round n: the flood's n-th, then each tenant's
    # Each claim took the next turns nobody held: it left behind only what overlapping claims held.
    assert turns_left_behind([(c, r, [rank[pk] for pk in ids]) for c, r, ids in claims], tokens=2) == []


def test_a_key_alone_takes_every_slot_and_a_newcomer_joins_the_next_round() -> None:
    reliableq.enqueue_many("test.fair", [{}] * 30, fair_key="only")
    assert keys_of(claim(8)) == ["only"] * 8
    reliableq.enqueue("test.fair", {}, fair_key="new")
    assert keys_of(claim(2)) == ["only", "new"]


def test_priority_then_age_order_the_jobs_of_one_key() -> None:
    old = reliableq.enqueue("test.fair", {"n": "old"}, fair_key="a")
    young = reliableq.enqueue("test.fair", {"n": "young"}, fair_key="a")
    urgent = reliableq.enqueue("test.fair", {"n": "urgent"}, fair_key="a", priority=-5)
    later = reliableq.enqueue("test.fair", {"n": "later"}, fair_key="a", priority=5)
    assert [j.id for j in claim(4)] == [urgent.id, old.id, young.id, later.id]


def test_a_key_of_weight_two_takes_two_turns_to_anothers_one() -> None:
    with override_settings(RELIABLEQ={**settings.RELIABLEQ, "FAIR_WEIGHTS": {"gold": 2}}):
        reliableq.enqueue_many("test.fair", [{}] * 40, fair_key="gold")
        reliableq.enqueue_many("test.fair", [{}] * 40, fair_key="plain")
    assert Counter(keys_of(claim(30))) == Counter({"gold": 20, "plain": 10})


def test_jobs_of_a_kind_without_turns_are_claimed_by_age_and_never_starve() -> None:
    # Jobs stored before the kind was fair (or by a path that gives no turn) have no fair_seq.
    legacy = reliableq.enqueue_many("test.fair", [{}] * 3, fair_key="old")
    Job.objects.filter(pk__in=legacy).update(fair_seq=None)
    reliableq.enqueue_many("test.fair", [{}] * 50, fair_key="new")
    taken = {j.id for j in claim(5)}
    assert set(legacy) <= taken


def test_other_kinds_in_the_queue_keep_their_place_in_age_order() -> None:
    plain = reliableq.enqueue_many("demo.noop", [{}] * 3)
    reliableq.enqueue_many("test.fair", [{}] * 50, fair_key="flood")
    also = reliableq.enqueue_many("demo.noop", [{}] * 3)
    first = claim(5)
    assert {j.id for j in first if j.kind == "demo.noop"} == set(plain)
    assert [j.kind for j in first].count("test.fair") == 2
    rest = claim(100)
    assert {j.id for j in rest} >= set(also)


def test_a_paused_queue_gives_no_fair_job() -> None:
    reliableq.enqueue_many("test.fair", [{}] * 5, fair_key="a")
    services.pause("default")
    assert claim(5) == []
    services.resume("default")
    assert len(claim(5)) == 5


def test_per_key_limits_hold_and_the_keys_rotate() -> None:
    # test.fair_keyed: max_running_per_key=1 on the concurrency_key; tenants are fair_keys.
    for tenant in "ab":
        for slot in range(3):
            reliableq.enqueue("test.fair_keyed", {}, fair_key=tenant, concurrency_key=f"{tenant}-{slot}")
            reliableq.enqueue("test.fair_keyed", {}, fair_key=tenant, concurrency_key=f"{tenant}-{slot}")
    first = claim(4)
    assert len({j.concurrency_key for j in first}) == 4  # one per concurrency_key
    assert Counter(keys_of(first)) == Counter({"a": 2, "b": 2})


def test_a_capped_fair_kind_keeps_its_cap_and_rotates_its_keys() -> None:
    reliableq.enqueue_many("test.fair_capped", [{}] * 20, fair_key="big")
    reliableq.enqueue("test.fair_capped", {}, fair_key="small")
    first = claim(10)
    assert keys_of(first) == ["big", "small", "big"]  # max_running=3
    finish(first)
    assert keys_of(claim(10)) == ["big"] * 3


def test_a_rate_limited_fair_kind_rotates_its_keys() -> None:
    reliableq.enqueue_many("test.fair_rated", [{}] * 20, fair_key="big")
    reliableq.enqueue("test.fair_rated", {}, fair_key="small")
    assert keys_of(claim(2)) == ["big", "small"]


def test_a_retried_job_keeps_its_turn() -> None:
    reliableq.enqueue_many("test.fair", [{}] * 3, fair_key="a")
    reliableq.enqueue_many("test.fair", [{}] * 3, fair_key="b")
    [first] = claim(1)
    finish([first], JobStatus.PENDING, Outcome.FAILED_TRANSIENT)
    again = claim(2)
    assert keys_of(again) == ["a", "b"]
    assert first.id in {j.id for j in again}


def test_a_batch_of_many_kinds_takes_turns_per_key() -> None:
    reliableq.enqueue_many("test.fair", [{}] * 20, fair_key="big")
    made, _ = services.submit_many(
        [NewJob(kind="test.fair", payload={}, options=JobOptions(fair_key=k)) for k in ("x", "x", "y")]
        + [NewJob(kind="demo.noop", payload={})]
    )
    assert [j.fair_key for j in made] == ["x", "x", "y", None]
    seqs = dict(Job.objects.filter(pk__in=[j.id for j in made]).values_list("id", "fair_seq"))
    assert seqs[made[0].id] == seqs[made[2].id] == 0.0  # each key's first turn: the head's (big's first)
    assert seqs[made[1].id] == 1.0
    assert seqs[made[3].id] is None
    assert Counter(keys_of(claim(4))) == Counter(["big", "x", "y", "big"])


def test_a_submitters_jobs_of_a_fair_kind_take_the_submitter_as_their_key() -> None:
    alice = User.objects.create_user("alice")
    job, _ = services.submit("test.fair", {}, submitted_by=alice)
    assert job.fair_key == f"user:{alice.pk}"
    [other], _ = services.submit_many([NewJob(kind="test.fair", payload={})], submitted_by=alice)
    assert other.fair_key == f"user:{alice.pk}"
    plain, _ = services.submit("demo.noop", {}, submitted_by=alice)
    assert plain.fair_key is None


def test_a_fair_key_for_a_kind_that_is_not_fair_is_refused() -> None:
    with pytest.raises(InvalidJob, match="is not fair"):
        reliableq.enqueue("demo.noop", {}, fair_key="a")
    with pytest.raises(InvalidJob, match="fair_key must be a non-empty string"):
        reliableq.enqueue("test.fair", {}, fair_key="")
    with pytest.raises(InvalidJob, match=r"job 0: .*is not fair"):
        services.submit_many([NewJob(kind="demo.noop", payload={}, options=JobOptions(fair_key="a"))])
    assert not Job.objects.exists()


def test_a_workflows_members_take_their_keys_turns_at_enqueue_like_a_batch() -> None:
    wf = reliableq.workflow(name="a fan-out of one key")
    for n in range(50):
        wf.add("test.fair", {"n": n}, name=f"m{n}", fair_key="a")
    record = wf.enqueue()
    reliableq.enqueue("test.fair", {}, fair_key="b")
    members = Job.objects.filter(workflow=record)
    assert {m.fair_key for m in members} == {"a"} and None not in {m.fair_seq for m in members}
    assert sorted(keys_of(claim(2))) == ["a", "b"], "b's one job waits for one of a's, not for all fifty"


def test_a_released_member_takes_its_turn_when_it_becomes_pending() -> None:
    wf = reliableq.workflow(name="released behind the others' work")
    root = wf.add("test.fair", {}, name="root", fair_key="a")
    for n in range(30):
        wf.add("test.fair", {"n": n}, name=f"m{n}", after=[root], fair_key="a")
    record = wf.enqueue()
    waiting = Job.objects.filter(workflow=record, status=JobStatus.WAITING)
    assert waiting.count() == 30 and {m.fair_seq for m in waiting} == {1.0}  # the stride, kept until the turn
    [taken] = claim(1)
    reliableq.enqueue_many("test.fair", [{}] * 3, fair_key="b")  # due before the release
    jobqueue.finish([Finish(job_id=taken.id, lease_token=taken.lease_token, status="SUCCEEDED",
                            outcome="SUCCEEDED", workflow=True)])  # fmt: skip
    released = Job.objects.filter(workflow=record, status=JobStatus.PENDING)
    assert released.count() == 30
    assert len({m.fair_seq for m in released}) == 30, "one stride apart, as a batch's, not one turn for all"
    assert Counter(keys_of(claim(6))) == {"a": 3, "b": 3}, "the fan-out alternates with b's due work"


def test_a_callback_of_a_fair_kind_takes_its_key_and_a_turn() -> None:
    wf = reliableq.workflow(name="callback")
    wf.add("test.fair", {}, name="only", fair_key="a")
    wf.on("success", "test.fair", {}, fair_key="a")
    record = wf.enqueue()
    [taken] = claim(1)
    jobqueue.finish([Finish(job_id=taken.id, lease_token=taken.lease_token, status="SUCCEEDED",
                            outcome="SUCCEEDED", workflow=True)])  # fmt: skip
    callback = Job.objects.get(workflow=record, member_name__isnull=True)
    assert callback.fair_key == "a" and callback.fair_seq is not None


def test_a_fair_key_on_a_member_of_a_kind_that_is_not_fair_is_refused() -> None:
    wf = reliableq.workflow()
    wf.add("wf.step", {}, name="m", fair_key="a")
    with pytest.raises(InvalidJob, match="fair_key"):
        wf.enqueue()
