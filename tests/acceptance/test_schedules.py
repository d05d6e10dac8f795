"""Schedules served by real workers: one job per slot, every slot, across the fleet and its failures.

Schedules are an operator's rows, saved here while the workers run (the workers read them from the
database; demo.noop and test.sleep are kinds every worker has).
"""

from __future__ import annotations

import datetime as dt
import itertools
import signal
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from reliableq import schedules
from reliableq.models import Attempt, Job, JobStatus, Schedule
from tests.support import WorkerProcess, wait_until

from .helpers import db_now, max_in_flight

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEADS = "is the maintenance leader"
SECOND = dt.timedelta(seconds=1)


def save(name: str, cron: str, kind: str = "demo.noop", **fields: Any) -> Schedule:
    return schedules.save(Schedule(name=name, kind=kind, cron=cron, **fields))


def slots(
    name: str, status: str | None = None, start: dt.datetime | None = None, end: dt.datetime | None = None
) -> list[dt.datetime]:
    """The slots the schedule's jobs (of `status`) were made for, in [start, end), oldest first."""
    jobs = Job.objects.filter(payload__schedule=name)
    if status is not None:
        jobs = jobs.filter(status=status)
    made = sorted(dt.datetime.fromisoformat(p["scheduled_for"]) for p in jobs.values_list("payload", flat=True))
    return [s for s in made if (start is None or s >= start) and (end is None or s < end)]


def served_past(name: str, moment: dt.datetime) -> bool:
    """The leader's rounds have gone past `moment` for this schedule."""
    next_slot = Schedule.objects.filter(name=name).values_list("next_slot", flat=True).get()
    return next_slot is not None and next_slot > moment


def leader_of(workers: list[WorkerProcess]) -> WorkerProcess:
    return wait_until(
        lambda: next((w for w in workers if LEADS in w.output()), None), timeout=30, what="a maintenance leader"
    )


@pytest.mark.parametrize("seconds", [20, pytest.param(60, marks=pytest.mark.nightly)])
def test_an_every_second_schedule_served_by_three_workers_makes_exactly_one_job_per_slot(spawn_worker, seconds):
    """Three workers keep running for the window; its leader is SIGKILLed half-way. Beside it, a */3 s
    schedule, faster than the 5 s SCHEDULE_SECONDS, loses none of its slots either."""
    save("every-second", "* * * * * *")
    save("every-3s", "*/3 * * * * *")
    workers = [spawn_worker() for _ in range(3)]
    leader = leader_of(workers)
    start = db_now().replace(microsecond=0) + 3 * SECOND  # after the leader's first round
    end = start + seconds * SECOND
    wait_until(lambda: db_now() >= start + seconds / 2 * SECOND, timeout=seconds, what="half the window")
    leader.signal(signal.SIGKILL)
    wait_until(lambda: served_past("every-second", end) and served_past("every-3s", end), timeout=seconds + 30,
               what="the next leader to serve the whole window")  # fmt: skip

    made = slots("every-second", None, start, end)
    assert made == [start + n * SECOND for n in range(seconds)]  # exactly one job per slot, none skipped
    thirds = slots("every-3s", None, start, end)
    assert thirds == [s for s in made if s.second % 3 == 0]
    wait_until(lambda: len(slots("every-second", JobStatus.SUCCEEDED, start, end)) == seconds, timeout=60,
               what="every job of the window run")  # fmt: skip


def test_each_catch_up_policy_after_a_stopped_fleet(spawn_worker):
    for policy in ("latest", "all", "none"):
        save(policy, "* * * * * *", catch_up=policy)
    first = spawn_worker(env={"RELIABLEQ_SCHEDULE_SECONDS": "0.5"})  # the missed bound: 2 x (0.5 s + 2 s) = 5 s
    wait_until(lambda: all(len(slots(p)) >= 2 for p in ("latest", "all", "none")), timeout=30, what="jobs made")
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    stopped = db_now()
    # The first worker may have made its last slot up to a second ahead (scheduler.AHEAD) before it
    # stopped; 11 s with no worker leaves at least 4 slots past the new round's 5 s bound.
    wait_until(lambda: db_now() > stopped + 11 * SECOND, timeout=30, what="slots to pass with no worker")
    spawn_worker(env={"RELIABLEQ_SCHEDULE_SECONDS": "0.5"})
    wait_until(lambda: all(served_past(p, db_now()) for p in ("latest", "all", "none")), timeout=30, what="a round")

    def gaps(policy: str) -> list[tuple[dt.datetime, dt.datetime]]:
        made = slots(policy)
        return [(a, b) for a, b in itertools.pairwise(made) if b - a > SECOND]

    assert gaps("all") == []  # a job for every slot, the missed ones too
    ((before, latest),) = gaps("latest")  # one gap: the missed slots but the newest
    ((before_none, resumed),) = gaps("none")  # one gap: every missed slot
    assert latest - before >= 4 * SECOND and resumed - before_none >= 5 * SECOND, "several slots were missed"
    # One round served the three: `none` resumes right after the newest missed slot, which `latest` made.
    assert resumed == latest + SECOND
    for policy in ("latest", "all", "none"):
        made = slots(policy)
        assert len(made) == len(set(made))


DST_SCHEDULES = {
    # name: (cron, the local slots of the day, as the jobs' scheduled_for says them)
    "spring-daily": ("30 2 29 3 *", ["2026-03-29T03:00:00+02:00"]),
    "autumn-daily": ("30 2 25 10 *", ["2026-10-25T02:30:00+02:00"]),
    "spring-daily-6": ("0 30 2 29 3 *", ["2026-03-29T03:00:00+02:00"]),  # six fields: cronsim alone makes none
    "autumn-daily-6": ("0 30 2 25 10 *", ["2026-10-25T02:30:00+02:00"]),  # six fields: cronsim alone makes two
    "spring-hourly": ("0 * 29 3 *", [f"2026-03-29T{h:02}:00:00+01:00" for h in (0, 1)]
                      + [f"2026-03-29T{h:02}:00:00+02:00" for h in range(3, 24)]),
    "autumn-hourly": ("0 * 25 10 *", [f"2026-10-25T{h:02}:00:00+02:00" for h in (0, 1, 2)]
                      + [f"2026-10-25T{h:02}:00:00+01:00" for h in range(2, 24)]),
}  # fmt: skip


def test_a_dst_day_in_paris_makes_one_job_per_slot_spring_and_autumn(spawn_worker):
    """A fleet stopped since the eve of each change of 2026 comes back: catch_up="all" makes the
    missed slots, computed by the worker in Europe/Paris."""
    paris = ZoneInfo("Europe/Paris")
    for name, (cron, _) in DST_SCHEDULES.items():
        row = save(name, cron, timezone="Europe/Paris", catch_up="all")
        month, day = (3, 29) if name.startswith("spring") else (10, 25)
        eve = dt.datetime(2026, month, day, tzinfo=paris) - SECOND
        Schedule.objects.filter(pk=row.pk).update(next_slot=schedules.first_slot(row, eve))
    spawn_worker()
    wait_until(lambda: all(served_past(n, db_now()) for n in DST_SCHEDULES), timeout=30, what="the round")
    for name, (_, expected) in DST_SCHEDULES.items():
        payloads = Job.objects.filter(payload__schedule=name).values_list("payload", flat=True)
        made = sorted(p["scheduled_for"] for p in payloads if p["scheduled_for"].startswith("2026"))
        assert made == sorted(expected), name
    assert len(DST_SCHEDULES["spring-hourly"][1]) == 23 and len(DST_SCHEDULES["autumn-hourly"][1]) == 25


def test_a_slow_job_with_overlap_skip_never_runs_beside_its_previous_one(spawn_worker):
    """Every second, each job 2.5 s long: under skip one at a time; allowed, they pile up (the control)."""
    save("skip", "* * * * * *", kind="test.sleep", payload={"seconds": 2.5}, overlap="skip")
    save("allow", "* * * * * *", kind="test.sleep", payload={"seconds": 2.5})
    spawn_worker("--concurrency", "16")
    wait_until(lambda: Job.objects.filter(payload__schedule="skip", status=JobStatus.SUCCEEDED).count() >= 3,
               timeout=60, what="three skip jobs run")  # fmt: skip

    def runs(name: str) -> list[tuple[dt.datetime, dt.datetime]]:
        spans: dict[Any, list[dt.datetime]] = {}
        attempts = Attempt.objects.filter(job__payload__schedule=name, finished_at__isnull=False)
        for job_id, started, finished in attempts.values_list("job_id", "started_at", "finished_at"):
            span = spans.setdefault(job_id, [started, finished])
            span[0], span[1] = min(span[0], started), max(span[1], finished)
        return [(a, b) for a, b in spans.values()]

    assert max_in_flight(runs("skip")) == 1
    assert max_in_flight(runs("allow")) >= 2
    skipped = slots("skip")
    assert any(b - a > SECOND for a, b in itertools.pairwise(skipped)), "slots were skipped"
