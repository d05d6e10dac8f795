"""The dashboard's charts: their queries give the right numbers for a history built by hand, and the
page draws them as SVG with every number also in a table.

Times are set relative to the database's now(), which a test's transaction holds still, so each
event lands in a known minute of the chart's hour.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from django.test import Client

from reliableq.admin import charts
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.queue import db as queue_db
from reliableq.queue import stats

from .pages import body, section, text

DASHBOARD = "/admin/reliableq/queuedashboard/"
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def clock(db: None) -> tuple[dt.datetime, dt.datetime]:
    """(now, the start of now's minute) by database time."""
    with queue_db.cursor() as cursor:
        cursor.execute("SELECT now(), date_trunc('minute', now())")
        now, minute = cursor.fetchone()
    return now, minute


def job(
    *,
    status: str = JobStatus.PENDING,
    kind: str = "demo.noop",
    created: dt.datetime,
    run_at: dt.datetime | None = None,
    finished: dt.datetime | None = None,
    attempts: int = 0,
    **fields: object,
) -> Job:
    made = Job.objects.create(status=status, kind=kind, attempts=attempts, finished_at=finished, **fields)
    Job.objects.filter(pk=made.pk).update(created_at=created, run_at=run_at or created)
    return made


def attempt(
    of: Job, number: int, *, started: dt.datetime, seconds: float | None = 1.0, outcome: str = Outcome.SUCCEEDED
) -> Attempt:
    return Attempt.objects.create(
        job=of,
        number=number,
        worker_id="w1",
        lease_token=uuid.uuid4(),
        started_at=started,
        outcome=outcome,
        finished_at=None if seconds is None else started + dt.timedelta(seconds=seconds),
    )


def test_finished_per_minute_counts_each_minute_of_the_last_hour_by_final_status(clock: tuple) -> None:
    now, m0 = clock
    for status, at in [
        (JobStatus.SUCCEEDED, m0 - 5 * MINUTE + dt.timedelta(seconds=10)),
        (JobStatus.SUCCEEDED, m0 - 5 * MINUTE + dt.timedelta(seconds=20)),
        (JobStatus.DEAD, m0 - 5 * MINUTE + dt.timedelta(seconds=59)),
        (JobStatus.CANCELLED, m0 - 30 * MINUTE),
        (JobStatus.SUCCEEDED, m0 - 59 * MINUTE),  # the first minute of the hour
        (JobStatus.SUCCEEDED, m0 - 59 * MINUTE - dt.timedelta(microseconds=1)),  # just before it
        (JobStatus.DEAD, now),  # this minute
    ]:
        job(status=status, created=at - MINUTE, finished=at)
    job(created=m0 - 5 * MINUTE)  # PENDING: not finished

    minutes = stats.finished_per_minute()

    assert [m.minute for m in minutes] == [m0 - k * MINUTE for k in range(59, -1, -1)]
    nonzero = {round((m0 - m.minute) / MINUTE): m.counts for m in minutes if any(m.counts.values())}
    assert nonzero == {
        5: {"SUCCEEDED": 2, "DEAD": 1, "CANCELLED": 0},
        30: {"SUCCEEDED": 0, "DEAD": 0, "CANCELLED": 1},
        59: {"SUCCEEDED": 1, "DEAD": 0, "CANCELLED": 0},
        0: {"SUCCEEDED": 0, "DEAD": 1, "CANCELLED": 0},
    }


def test_backlog_counts_due_jobs_waiting_for_their_first_attempt_at_each_minutes_end(clock: tuple) -> None:
    now, m0 = clock
    s = dt.timedelta(seconds=1)
    # k is how many minutes before this one a minute starts; waiting[k] is what the chart must show.
    waiting: dict[int, int] = {k: 0 for k in range(60)}

    def expect(first: int, last: int) -> None:
        """Counted at the end of minutes k = first, first-1, ..., last."""
        for k in range(last, first + 1):
            waiting[k] += 1

    job(created=m0 - 90 * MINUTE)  # waiting all hour
    expect(59, 0)
    job(created=m0 - 20 * MINUTE + 5 * s)  # joins in minute 20
    expect(20, 0)
    job(created=now, run_at=now + dt.timedelta(hours=1))  # scheduled for later: not due, not counted
    job(created=m0 - 50 * MINUTE, run_at=m0 - 10 * MINUTE + s)  # due from minute 10
    expect(10, 0)
    started_in_hour = job(
        status=JobStatus.SUCCEEDED, created=m0 - 30 * MINUTE + 10 * s, attempts=1, finished=m0 - 25 * MINUTE + 11 * s
    )
    attempt(started_in_hour, 1, started=m0 - 25 * MINUTE + 10 * s)  # waited from minute 30, left in minute 25
    expect(30, 26)
    waited_since_before = job(status=JobStatus.RUNNING, created=m0 - 120 * MINUTE, attempts=1, lease_token=uuid.uuid4())
    attempt(waited_since_before, 1, started=m0 - 40 * MINUTE + s, seconds=None, outcome=Outcome.RUNNING)
    expect(59, 41)
    started_before = job(status=JobStatus.PENDING, created=m0 - 200 * MINUTE, attempts=2)
    attempt(started_before, 1, started=m0 - 100 * MINUTE, outcome=Outcome.FAILED_TRANSIENT)
    attempt(started_before, 2, started=m0 - 10 * MINUTE, outcome=Outcome.FAILED_TRANSIENT)  # waiting to retry
    cancelled = job(status=JobStatus.CANCELLED, created=m0 - 15 * MINUTE + s, finished=m0 - 12 * MINUTE + s)
    assert cancelled.attempts == 0
    expect(15, 13)
    # Its retry moved run_at past its first start: the wait before that start is lost, never doubled.
    retried = job(status=JobStatus.PENDING, created=m0 - 8 * MINUTE, run_at=m0 - 2 * MINUTE, attempts=1)
    attempt(retried, 1, started=m0 - 8 * MINUTE + 30 * s, outcome=Outcome.FAILED_TRANSIENT)

    points = stats.backlog_per_minute()

    assert [p.minute for p in points] == [m0 - k * MINUTE for k in range(59, -1, -1)]
    assert [p.waiting for p in points] == [waiting[k] for k in range(59, -1, -1)]


def test_p95_by_kind_is_taken_over_finished_handler_runs_of_the_last_hour(clock: tuple) -> None:
    now, _ = clock
    fast = job(status=JobStatus.SUCCEEDED, kind="k.fast", created=now - dt.timedelta(minutes=50), attempts=1)
    for n in range(1, 21):  # 1 s .. 20 s
        attempt(
            fast,
            n,
            started=now - dt.timedelta(minutes=40),
            seconds=float(n),
            outcome=Outcome.SUCCEEDED if n % 2 else Outcome.FAILED_TRANSIENT,
        )
    attempt(fast, 21, started=now - dt.timedelta(minutes=30), seconds=1000, outcome=Outcome.LEASE_EXPIRED)
    attempt(fast, 22, started=now - dt.timedelta(minutes=30), seconds=1000, outcome=Outcome.LEASE_LOST)
    attempt(fast, 23, started=now - dt.timedelta(minutes=1), seconds=None, outcome=Outcome.RUNNING)
    attempt(fast, 24, started=now - dt.timedelta(minutes=61), seconds=500)  # before the hour
    slow = job(status=JobStatus.DEAD, kind="k.slow", created=now - dt.timedelta(minutes=20), attempts=2)
    attempt(slow, 1, started=now - dt.timedelta(minutes=20), seconds=100, outcome=Outcome.TIMED_OUT)
    attempt(slow, 2, started=now - dt.timedelta(minutes=10), seconds=100, outcome=Outcome.FAILED_PERMANENT)

    durations = stats.p95_by_kind()

    # percentile_cont interpolates: position 0.95 * (20 - 1) = 18.05 between 19 s and 20 s.
    assert [(d.kind, round(d.p95_seconds, 3), d.attempts) for d in durations] == [
        ("k.slow", 100.0, 2),
        ("k.fast", 19.05, 20),
    ]
    assert [d.kind for d in stats.p95_by_kind(limit=1)] == ["k.slow"]


def test_chart_queries_on_an_empty_queue_give_an_hour_of_zeros(clock: tuple) -> None:
    assert [sum(m.counts.values()) for m in stats.finished_per_minute()] == [0] * 60
    assert [p.waiting for p in stats.backlog_per_minute()] == [0] * 60
    assert stats.p95_by_kind() == []


def test_dashboard_draws_the_charts_as_svg_with_their_numbers_in_tables(clock: tuple, operator_client: Client) -> None:
    _now, m0 = clock
    for at in (m0 - 3 * MINUTE, m0 - 3 * MINUTE + dt.timedelta(seconds=5)):
        done = job(status=JobStatus.SUCCEEDED, kind="test.sleep", created=at - MINUTE, finished=at, attempts=1)
        attempt(done, 1, started=at - dt.timedelta(seconds=2), seconds=2)
    job(status=JobStatus.DEAD, created=m0 - 4 * MINUTE, finished=m0 - 3 * MINUTE)
    job(created=m0 - 2 * MINUTE)  # waiting

    page = body(operator_client.get(DASHBOARD))

    for slug in ("finished", "backlog", "durations"):
        panel = section(page, f'id="chart-{slug}"', "</details>")
        svg = section(panel, "<svg", "</svg>")
        assert 'role="img"' in svg and f'aria-labelledby="chart-{slug}-title chart-{slug}-desc"' in svg
        assert f'<desc id="chart-{slug}-desc">' in svg
    finished = section(page, 'id="chart-finished"', "</details>")
    three_ago = charts.hhmm(m0 - 3 * MINUTE)
    assert f"{three_ago}: 2 SUCCEEDED" in finished and f"{three_ago}: 1 DEAD" in finished  # bar tooltips
    row = re.search(rf"<tr><th scope=\"row\">{three_ago}</th>(.*?)</tr>", finished)
    assert row and [text(c) for c in re.findall(r"<td>(.*?)</td>", row.group(1))] == ["2", "1", "0"]
    assert "In the last hour: 2 SUCCEEDED, 1 DEAD, 0 CANCELLED." in text(finished)
    backlog = section(page, 'id="chart-backlog"', "</details>")
    assert "Waiting now: 1." in text(backlog) and "<polyline" in backlog
    durations = section(page, 'id="chart-durations"', "</details>")
    assert "test.sleep 2 s (2 attempts)" in text(durations)
    assert re.search(r"<th scope=\"row\">test.sleep</th><td>2 s</td><td>2</td>", durations)


def test_bars_stack_to_their_counts_on_a_scale_rounded_up_to_a_nice_number() -> None:
    base = dt.datetime(2026, 1, 1, 10, 0, tzinfo=dt.timezone.utc)
    minutes = [
        stats.FinishedMinute(minute=base + i * MINUTE, counts={"SUCCEEDED": 0, "DEAD": 0, "CANCELLED": 0})
        for i in range(60)
    ]
    minutes[10] = stats.FinishedMinute(minute=minutes[10].minute, counts={"SUCCEEDED": 6, "DEAD": 2, "CANCELLED": 1})

    chart = charts.finished_chart(minutes)

    assert [t.label for t in chart.y_ticks] == ["0", "5", "10"]  # 9 rounds up to 10
    plot = chart.bottom - chart.top
    assert [(b.series, b.height) for b in chart.bars] == [
        ("succeeded", round(plot * 0.6, 1)),
        ("dead", round(plot * 0.2, 1)),
        ("cancelled", round(plot * 0.1, 1)),
    ]
    assert chart.bars[0].y + chart.bars[0].height == pytest.approx(chart.bottom, abs=0.1)
    assert chart.bars[1].y + chart.bars[1].height == pytest.approx(chart.bars[0].y, abs=0.1)
    assert [t.label for t in chart.x_ticks] == ["10:00", "10:10", "10:20", "10:30", "10:40", "10:50"]


def test_charts_of_an_idle_hour_have_no_shapes_and_a_unit_scale() -> None:
    base = dt.datetime(2026, 1, 1, 10, 0, tzinfo=dt.timezone.utc)
    idle = [stats.BacklogPoint(minute=base + i * MINUTE, waiting=0) for i in range(60)]

    line = charts.backlog_chart(idle)

    assert [t.label for t in line.y_ticks] == ["0", "0.5", "1"]
    assert {p.split(",")[1] for p in line.line.split()} == {str(line.bottom)}
    assert charts.duration_chart([]).rows == []
    assert charts.nice_ceiling(0) == 1 and charts.nice_ceiling(11) == 20 and charts.nice_ceiling(200) == 200
    assert charts.nice_ceiling(201) == 500 and charts.nice_ceiling(7.5) == 10 and charts.nice_ceiling(600) == 1000
    assert [charts.seconds(v) for v in (0.0042, 0.25, 1.5, 19.05, 1234.5)] == [
        "4.2 ms",
        "250 ms",
        "1.5 s",
        "19.1 s",
        "1234 s",
    ]
