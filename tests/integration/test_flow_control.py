"""Flow control in the claim and the finish: per-key limits, rate limits, unique jobs, snooze, pause, cancel.

Each limit is decided by the database in the claim transaction (its locks, its time); these
tests drive the real statements from threads on their own connections, the way a fleet would.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db.models.functions import Now

import reliableq
from reliableq import queue as jobqueue
from reliableq import registry, services
from reliableq.errors import InvalidJob, WrongStatus
from reliableq.models import Attempt, Job, JobStatus, Outcome, QueueState
from reliableq.options import JobOptions
from reliableq.queue import Finish, db
from reliableq.testing import run_due
from testproject.jobs import per_key, rated

from ..support import wait_until
from .helpers import claim_jobs, db_now, expire, raw_connect, spawn

reliableq.handler("test.per_key", max_running_per_key=2)(per_key)
reliableq.handler("test.rated", rate_limit="10/s")(rated)
pytestmark = pytest.mark.django_db(transaction=True)


def claim_limited(worker_id: str = "w-test", *, limit: int = 10, queues: tuple[str, ...] = ("default",)) -> list:
    jobs, _ = jobqueue.claim(
        worker_id=worker_id, queues=queues, limit=limit, lease_seconds=30, limits=registry.limits(), rescue=False
    )
    return jobs


def running_per_key() -> Counter[str]:
    return Counter(
        Job.objects.filter(kind="test.per_key", status=JobStatus.RUNNING).values_list("concurrency_key", flat=True)
    )


# -- unique_key ------------------------------------------------------------------------------


def test_unique_key_returns_the_active_job_and_allows_a_new_one_after_it_finishes() -> None:
    first = reliableq.enqueue("demo.noop", {"n": 1}, unique_key="report:7")
    again = reliableq.enqueue("demo.noop", {"n": 2}, unique_key="report:7")
    assert again.pk == first.pk and Job.objects.count() == 1

    [ran] = run_due()
    assert ran.status == JobStatus.SUCCEEDED
    after = reliableq.enqueue("demo.noop", {"n": 3}, unique_key="report:7")
    assert after.pk != first.pk
    assert Job.objects.filter(unique_key="report:7").count() == 2


def test_one_active_row_per_unique_key_under_16_concurrent_enqueuers() -> None:
    start = threading.Barrier(16)

    def enqueue_one(n: int) -> str:
        start.wait()
        return str(reliableq.enqueue("demo.noop", {"n": n}, unique_key="nightly").pk)

    ids = {future.result(timeout=60) for future in [spawn(enqueue_one, n) for n in range(16)]}
    assert len(ids) == 1
    assert Job.objects.filter(unique_key="nightly", status__in=["PENDING", "RUNNING"]).count() == 1


def test_a_users_unique_key_never_returns_another_users_job() -> None:
    alice, mallory = User.objects.create(username="alice"), User.objects.create(username="mallory")
    theirs, _ = services.submit("demo.noop", {"secret": 1}, JobOptions(unique_key="k"), submitted_by=alice)
    mine, made = services.submit("demo.noop", {}, JobOptions(unique_key="k"), submitted_by=mallory)
    assert made and mine.pk != theirs.pk
    again, made_again = services.submit("demo.noop", {}, JobOptions(unique_key="k"), submitted_by=alice)
    assert again.pk == theirs.pk and not made_again


def test_replaying_a_dead_job_whose_unique_key_is_taken_again_is_refused() -> None:
    dead = reliableq.enqueue("demo.noop", {}, unique_key="u")
    Job.objects.filter(pk=dead.pk).update(status=JobStatus.DEAD, finished_at=Now())
    reliableq.enqueue("demo.noop", {}, unique_key="u")
    with pytest.raises(WrongStatus, match="another job with it is active"):
        services.replay(dead.pk)


def test_a_concurrency_key_needs_a_kind_with_a_per_key_limit() -> None:
    with pytest.raises(InvalidJob, match="no max_running_per_key") as caught:
        reliableq.enqueue("demo.noop", {}, concurrency_key="acct:1")
    assert caught.value.field == "concurrency_key"


# -- max_running_per_key ---------------------------------------------------------------------


def test_a_saturated_key_does_not_block_the_keys_behind_it() -> None:
    # Ten jobs of key "a" first in line (better priority), then one job each of "b" and "c".
    for n in range(10):
        reliableq.enqueue("test.per_key", {"n": n}, concurrency_key="a", priority=-1)
    reliableq.enqueue("test.per_key", {}, concurrency_key="b")
    reliableq.enqueue("test.per_key", {}, concurrency_key="c")

    taken = claim_limited(limit=10)

    assert Counter(j.concurrency_key for j in taken) == {"a": 2, "b": 1, "c": 1}
    assert claim_limited(limit=10) == []  # "a" is full; its other eight wait
    assert Job.objects.filter(concurrency_key="a", status=JobStatus.PENDING).count() == 8


def test_per_key_limit_holds_across_concurrent_claimers() -> None:
    for n in range(60):
        reliableq.enqueue("test.per_key", {"n": n}, concurrency_key=f"k{n % 3}")
    peaks: list[int] = []
    go = threading.Barrier(8)

    def claimer(n: int) -> int:
        go.wait()
        taken = 0
        for _ in range(10):
            jobs = claim_limited(f"w{n}", limit=2)
            taken += len(jobs)
            peaks.append(max(running_per_key().values(), default=0))
            # Finish what was taken, so that keys free up and the claimers compete again.
            jobqueue.finish(
                [Finish(job_id=j.id, lease_token=j.lease_token, status="SUCCEEDED", outcome="SUCCEEDED") for j in jobs]
            )
        return taken

    total = sum(future.result(timeout=120) for future in [spawn(claimer, n) for n in range(8)])
    assert total > 0
    assert max(peaks) <= 2
    # Every start, by attempt intervals: never more than 2 of one key RUNNING at once.
    assert max_overlap_per_key() <= 2


def max_overlap_per_key() -> int:
    """The most attempts of one concurrency key whose [started_at, finished_at) intervals overlap."""
    events: dict[str, list[tuple[dt.datetime, int]]] = {}
    for key, started, finished in Attempt.objects.filter(job__kind="test.per_key").values_list(
        "job__concurrency_key", "started_at", "finished_at"
    ):
        end = finished or dt.datetime.max.replace(tzinfo=dt.timezone.utc)
        events.setdefault(key, []).extend([(started, 1), (end, -1)])
    peak = 0
    for points in events.values():
        level = 0
        for _, step in sorted(points, key=lambda p: (p[0], p[1])):  # an end before a start at the same instant
            level += step
            peak = max(peak, level)
    return peak


# -- rate_limit ------------------------------------------------------------------------------


def test_a_rate_limited_kind_starts_at_most_n_per_window_and_the_rest_wait_unspent() -> None:
    reliableq.enqueue_many("test.rated", [{"n": n} for n in range(25)])
    reliableq.enqueue("demo.noop", {})

    first = claim_limited(limit=50)

    assert Counter(j.kind for j in first) == {"test.rated": 10, "demo.noop": 1}
    assert claim_limited(limit=50) == []
    throttled = Job.objects.filter(kind="test.rated", status=JobStatus.PENDING)
    assert throttled.count() == 15 and set(throttled.values_list("attempts", flat=True)) == {0}


def test_every_window_of_a_10_per_second_kind_holds_at_most_10_starts() -> None:
    reliableq.enqueue_many("test.rated", [{"n": n} for n in range(40)])
    started = 0
    deadline = db_now() + dt.timedelta(seconds=30)
    while started < 40 and db_now() < deadline:
        jobs = claim_limited(limit=7)
        started += len(jobs)
        jobqueue.finish(
            [Finish(job_id=j.id, lease_token=j.lease_token, status="SUCCEEDED", outcome="SUCCEEDED") for j in jobs]
        )
    assert started == 40
    starts = sorted(Attempt.objects.filter(job__kind="test.rated").values_list("started_at", flat=True))
    # Any window of one second: from each start, count those less than a second later.
    worst = max(sum(1 for t in starts[i:] if t - s < dt.timedelta(seconds=1)) for i, s in enumerate(starts))
    assert worst <= 10


def test_the_rate_limit_holds_across_concurrent_claimers() -> None:
    reliableq.enqueue_many("test.rated", [{"n": n} for n in range(60)])
    go = threading.Barrier(8)

    def claimer(n: int) -> int:
        go.wait()
        taken = 0
        deadline = db_now() + dt.timedelta(seconds=2.5)
        while db_now() < deadline:
            jobs = claim_limited(f"w{n}", limit=3)
            taken += len(jobs)
            jobqueue.finish(
                [Finish(job_id=j.id, lease_token=j.lease_token, status="SUCCEEDED", outcome="SUCCEEDED") for j in jobs]
            )
        return taken

    total = sum(future.result(timeout=120) for future in [spawn(claimer, n) for n in range(8)])
    starts = sorted(Attempt.objects.filter(job__kind="test.rated").values_list("started_at", flat=True))
    assert total == len(starts) >= 20  # the limit let work through, about 10 a second
    worst = max(sum(1 for t in starts[i:] if t - s < dt.timedelta(seconds=1)) for i, s in enumerate(starts))
    assert worst <= 10


def test_a_wide_rate_is_shared_by_shards_that_add_up_to_n() -> None:
    reliableq.handler("test.rated_wide", rate_limit="128/s")(rated)  # two shards of 64
    reliableq.enqueue_many("test.rated_wide", [{"n": n} for n in range(300)])

    taken = [len(claim_limited(limit=100)) for _ in range(3)]

    assert taken == [64, 64, 0]  # one shard per claim; both spent, the window is full
    from reliableq.models import RateWindow

    assert sorted(RateWindow.objects.filter(kind="test.rated_wide").values_list("shard", flat=True)) == [0, 1]


def test_a_lost_rate_window_row_is_made_again_before_any_start() -> None:
    from reliableq.models import RateWindow

    reliableq.enqueue_many("test.rated", [{"n": n} for n in range(15)])
    assert len(claim_limited(limit=5)) == 5
    RateWindow.objects.all().delete()  # as a TRUNCATE by an operator would
    assert len(claim_limited(limit=50)) == 10  # a fresh window: the rate's full room, no more
    assert claim_limited(limit=50) == []


def test_rate_parsing_refuses_what_it_cannot_mean() -> None:
    assert str(registry.Rate.parse("100/m")) == "100/m"
    for bad in ["10", "10/d", "0/s", "-1/s", "x/s", "10/ s"]:
        with pytest.raises(ValueError, match="rate_limit must look like"):
            registry.Rate.parse(bad)


# -- snooze ------------------------------------------------------------------------------------


def test_a_snoozed_job_with_one_attempt_still_succeeds() -> None:
    job = reliableq.enqueue("test.snooze", {"times": 2, "seconds": 0})
    assert job.max_attempts == 1

    ran = [run_due(), run_due(), run_due()]

    assert [r[0].outcome for r in ran] == [Outcome.SNOOZED, Outcome.SNOOZED, Outcome.SUCCEEDED]
    job.refresh_from_db()
    assert (job.status, job.snoozes, job.attempts, job.max_attempts) == (JobStatus.SUCCEEDED, 2, 3, 3)
    assert list(job.attempt_set.values_list("outcome", flat=True)) == ["SNOOZED", "SNOOZED", "SUCCEEDED"]


def test_a_snooze_waits_its_seconds_by_database_time() -> None:
    job = reliableq.enqueue("test.snooze", {"times": 1, "seconds": 600})
    before = db_now()
    run_due()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert dt.timedelta(seconds=599) < job.run_at - before < dt.timedelta(seconds=601)
    assert run_due() == []


def test_snoozes_are_bounded(settings: object) -> None:
    settings.RELIABLEQ = {**settings.RELIABLEQ, "MAX_SNOOZES": 2}  # type: ignore[attr-defined]
    job = reliableq.enqueue("test.snooze", {"times": 10, "seconds": 0})
    outcomes = [run_due()[0].outcome for _ in range(3)]
    assert outcomes == [Outcome.SNOOZED, Outcome.SNOOZED, Outcome.FAILED_TRANSIENT]
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD and "MAX_SNOOZES" in job.last_error


def test_snooze_refuses_nonsense() -> None:
    for bad in [-1, 400 * 86400, "soon"]:
        with pytest.raises((ValueError, TypeError)):
            reliableq.Snooze(bad)  # type: ignore[arg-type]


# -- pause and resume --------------------------------------------------------------------------


def test_nothing_is_claimed_from_a_paused_queue_and_resume_lets_claims_in() -> None:
    reliableq.enqueue("demo.noop", {}, queue="mail")
    reliableq.enqueue("demo.noop", {}, queue="default")
    services.pause("mail")

    taken = claim_jobs(queues=("mail", "default"))
    assert [j.queue for j in taken] == ["default"]
    assert services.has_work(["mail"]) is False  # --burst does not wait for a paused queue

    services.resume("mail")
    assert [j.queue for j in claim_jobs(queues=("mail",))] == ["mail"]


def test_a_per_key_claim_passes_over_a_key_another_claimer_holds_and_waits_for_none() -> None:
    # Another claimer holds key "a" (it is filling it): this claim takes "b" without waiting.
    reliableq.enqueue("test.per_key", {}, concurrency_key="a", priority=-1)
    b = reliableq.enqueue("test.per_key", {}, concurrency_key="b")
    with raw_connect() as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('reliableq:key:test.per_key'), hashtext('a'))")
        assert [j.id for j in claim_limited("w-skips")] == [b.pk]
        holder.commit()  # the key is free again
    assert [j.concurrency_key for j in claim_limited()] == ["a"]


@pytest.fixture
def keyed_and_capped_or_rated() -> Iterator[None]:
    """Two kinds limited per key and by a cap or a rate, registered for the test only."""
    saved = dict(registry._handlers)
    reliableq.handler("test.keyed_capped", max_running=2, max_running_per_key=1)(per_key)
    reliableq.handler("test.keyed_rated", max_running_per_key=1, rate_limit="3/m")(per_key)
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


@pytest.mark.usefixtures("keyed_and_capped_or_rated")
def test_a_per_key_limit_with_a_cap_or_a_rate_holds_with_it() -> None:
    # Claimed in the claim's transaction, under the cap's lock or the rate window's, by the per-key
    # statement: each key once, and no more than the cap or the rate lets start.
    for kind in ("test.keyed_capped", "test.keyed_rated"):
        for key in "aabcd":
            reliableq.enqueue(kind, {}, concurrency_key=key)

    taken = Counter((job.kind, job.concurrency_key) for job in claim_limited(limit=20))

    assert set(taken.values()) == {1}
    assert sum(n for (kind, _), n in taken.items() if kind == "test.keyed_capped") == 2
    assert sorted(key for kind, key in taken if kind == "test.keyed_rated") == ["a", "b", "c"]
    assert claim_limited(limit=20) == []  # the cap is full, the rate spent


def test_a_keys_room_is_counted_after_its_lock_not_in_the_claims_older_snapshot() -> None:
    """The claim is one statement: its snapshot is taken before it tries a key's lock. A claimer that
    filled the key and committed in between must still be counted (functions.KEY_ROOM counts in a
    snapshot of its own); counted in the claim's snapshot, the key would have room for two more."""
    a = [reliableq.enqueue("test.per_key", {"n": n}, concurrency_key="a").pk for n in range(3)]
    gate = 4_242_001
    with raw_connect() as filler, raw_connect(autocommit=True) as keeper, raw_connect(autocommit=True) as asker:
        keeper.execute("SELECT pg_advisory_lock(%s)", [gate])
        filler.execute("SELECT pg_advisory_xact_lock(hashtext('reliableq:key:test.per_key'), hashtext('a'))")
        filler.execute(
            "UPDATE reliableq_job SET status = 'RUNNING', lease_token = gen_random_uuid(), attempts = 1"
            " WHERE id = ANY(%s)",
            [a[:2]],
        )
        # The room is asked in a statement whose snapshot is taken now, then held at the gate.
        asked = "SELECT reliableq_key_room('test.per_key', 'a', 2) FROM (SELECT pg_advisory_lock_shared(%s) OFFSET 0) g"
        room = spawn(lambda: asker.execute(asked, [gate]).fetchone()[0])
        waiting = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s)"
        wait_until(lambda: keeper.execute(waiting, [gate]).fetchone()[0], what="the asking statement at the gate")
        filler.commit()  # the key is full, and its lock free
        keeper.execute("SELECT pg_advisory_unlock(%s)", [gate])
        assert room.result(timeout=30) == 0


def test_a_per_key_claim_after_a_pause_takes_nothing() -> None:
    # A pause once committed between a per-key claim's pick and its claim by id (chaos seed 1:
    # attempts started inside the pause window); the claim is one statement now, its pick the check.
    reliableq.enqueue("test.per_key", {}, concurrency_key="a")
    services.pause("default")
    assert claim_limited() == []
    assert Job.objects.get().status == JobStatus.PENDING
    services.resume("default")
    assert len(claim_limited()) == 1


def test_a_pause_until_a_time_ends_by_itself() -> None:
    reliableq.enqueue("demo.noop", {}, queue="mail")
    services.pause("mail", until=db_now() + dt.timedelta(seconds=600))
    assert claim_jobs(queues=("mail",)) == []
    QueueState.objects.filter(name="mail").update(paused_until=Now() - dt.timedelta(seconds=1))
    assert len(claim_jobs(queues=("mail",))) == 1


def test_a_running_job_of_a_paused_queue_finishes() -> None:
    reliableq.enqueue("demo.noop", {}, queue="mail")
    [job] = claim_jobs(queues=("mail",))
    services.pause("mail")
    result = jobqueue.finish(
        [Finish(job_id=job.id, lease_token=job.lease_token, status="SUCCEEDED", outcome="SUCCEEDED")]
    )
    assert result.finalized == [job.id]


def test_resume_wakes_listeners_at_once() -> None:
    import psycopg

    from testproject import dburl

    with psycopg.connect(dburl.build(db.connection().settings_dict), autocommit=True) as listener:
        listener.execute("LISTEN reliableq")
        services.pause("mail")
        services.resume("mail")
        received = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert received == ["mail"]


# -- cancel a running job ------------------------------------------------------------------------


def test_cancel_of_a_running_job_is_a_request_that_the_renewal_reports() -> None:
    reliableq.enqueue("test.cancellable", {})
    [job] = claim_jobs()
    assert jobqueue.renew([(job.id, job.lease_token)], lease_seconds=30) == {job.id: False}

    asked = services.cancel(job.id)

    assert asked.status == JobStatus.RUNNING and asked.cancel_requested_at is not None
    assert jobqueue.renew([(job.id, job.lease_token)], lease_seconds=30) == {job.id: True}


@pytest.mark.parametrize(
    ("reported", "final", "outcome"),
    [
        (("CANCELLED", "CANCELLED"), JobStatus.CANCELLED, Outcome.CANCELLED),
        (("PENDING", "FAILED_TRANSIENT"), JobStatus.CANCELLED, Outcome.CANCELLED),  # a retry is not wanted now
        (("PENDING", "SNOOZED"), JobStatus.CANCELLED, Outcome.CANCELLED),
        (("SUCCEEDED", "SUCCEEDED"), JobStatus.SUCCEEDED, Outcome.SUCCEEDED),  # finished anyway: kept
        (("DEAD", "FAILED_PERMANENT"), JobStatus.DEAD, Outcome.FAILED_PERMANENT),
    ],
)
def test_the_end_of_an_attempt_asked_to_cancel(reported: tuple[str, str], final: str, outcome: str) -> None:
    reliableq.enqueue("test.cancellable", {})
    [job] = claim_jobs()
    services.cancel(job.id)
    status, reported_outcome = reported
    jobqueue.finish([Finish(job_id=job.id, lease_token=job.lease_token, status=status, outcome=reported_outcome)])
    row = Job.objects.get(pk=job.id)
    assert row.status == final and row.lease_token is None
    assert row.attempt_set.get().outcome == outcome
    assert (row.finished_at is None) == (final == JobStatus.PENDING)


def test_an_expired_lease_of_a_job_asked_to_cancel_ends_cancelled() -> None:
    reliableq.enqueue("test.cancellable", {})
    [job] = claim_jobs()
    services.cancel(job.id)
    expire(job.id)
    [rescued] = jobqueue.rescue()
    assert rescued.status == JobStatus.CANCELLED
    assert Job.objects.get(pk=job.id).status == JobStatus.CANCELLED


def test_a_cancel_racing_a_success_leaves_exactly_one_final_state() -> None:
    def succeed(job: jobqueue.ClaimedJob, go: threading.Barrier) -> None:
        go.wait()
        jobqueue.finish([Finish(job_id=job.id, lease_token=job.lease_token, status="SUCCEEDED", outcome="SUCCEEDED")])

    def cancel(job: jobqueue.ClaimedJob, go: threading.Barrier) -> str:
        go.wait()
        try:
            return services.cancel(job.id).status
        except WrongStatus:
            return "refused"

    outcomes: Counter[str] = Counter()
    for n in range(20):
        reliableq.enqueue("test.cancellable", {"n": n})
        [job] = claim_jobs()
        go = threading.Barrier(2)
        finished, cancelled = spawn(succeed, job, go), spawn(cancel, job, go)
        finished.result(timeout=30)
        outcomes[cancelled.result(timeout=30)] += 1
        row = Job.objects.get(pk=job.id)
        assert row.status == JobStatus.SUCCEEDED and row.attempt_set.get().outcome == Outcome.SUCCEEDED
    assert sum(outcomes.values()) == 20 and set(outcomes) <= {"RUNNING", "refused"}


def test_cancel_of_a_running_job_is_audited(admin_user: User) -> None:
    reliableq.enqueue("test.cancellable", {})
    [job] = claim_jobs()
    services.cancel(job.id, by=admin_user)
    from django.contrib.admin.models import LogEntry

    assert LogEntry.objects.get().change_message == services.CANCEL_REQUESTED
