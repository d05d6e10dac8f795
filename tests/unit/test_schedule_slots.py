"""Slots of a cron expression in a time zone, across daylight-saving days, and the round's plan:
which slots get a job when a round comes (on time, late, after a stopped fleet)."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from reliableq import cron
from reliableq.scheduler import AHEAD, MAX_CATCH_UP, plan

UTC = dt.timezone.utc
PARIS = ZoneInfo("Europe/Paris")
SPRING = dt.date(2026, 3, 29)  # 02:00 CET -> 03:00 CEST: 02:xx does not exist
AUTUMN = dt.date(2026, 10, 25)  # 03:00 CEST -> 02:00 CET: 02:xx happens twice
SECOND = dt.timedelta(seconds=1)


def day_slots(expression: str, day: dt.date, tz: dt.tzinfo = PARIS) -> list[dt.datetime]:
    """The slots whose instant falls within the local day, in UTC."""
    start = dt.datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(UTC)
    end = (dt.datetime(day.year, day.month, day.day, tzinfo=tz) + dt.timedelta(days=1)).astimezone(UTC)
    found = itertools.takewhile(lambda s: s < end, cron.iter_after(expression, start - dt.timedelta(seconds=1), tz))
    return [s.astimezone(UTC) for s in found]


def local(slots: list[dt.datetime]) -> list[str]:
    return [s.astimezone(PARIS).strftime("%H:%M:%S%z") for s in slots]


@pytest.mark.parametrize("expression", ["30 2 * * *", "0 30 2 * * *"])  # five fields, and six with seconds
def test_a_daily_slot_in_a_skipped_hour_runs_once_when_the_clock_jumps(expression):
    assert local(day_slots(expression, SPRING)) == ["03:00:00+0200"]


@pytest.mark.parametrize("expression", ["30 2 * * *", "0 30 2 * * *"])
def test_a_daily_slot_in_a_repeated_hour_runs_once_at_its_first_occurrence(expression):
    assert local(day_slots(expression, AUTUMN)) == ["02:30:00+0200"]


def test_an_hourly_schedule_runs_once_per_real_hour_on_both_days():
    spring, autumn = day_slots("0 * * * *", SPRING), day_slots("0 * * * *", AUTUMN)
    assert len(spring) == 23 and "02:00:00+0100" not in local(spring)
    assert len(autumn) == 25 and local(autumn)[2:4] == ["02:00:00+0200", "02:00:00+0100"]
    for slots in (spring, autumn):
        assert all(b - a == dt.timedelta(hours=1) for a, b in itertools.pairwise(slots))


def test_every_second_runs_each_real_second_across_both_changes():
    for day in (SPRING, AUTUMN):
        start = dt.datetime(day.year, day.month, day.day, 0, 59, 58, tzinfo=UTC)  # the change is at 01:00 UTC
        slots = list(itertools.islice(cron.iter_after("* * * * * *", start, PARIS), 4))
        assert [s.astimezone(UTC) for s in slots] == [start + dt.timedelta(seconds=n) for n in range(1, 5)]


def test_backward_and_forward_agree_on_a_dst_day():
    for expression in ("30 2 * * *", "*/30 * * * *", "0 */20 2-3 * * *", "15 1-3 * * *"):
        for day in (SPRING, AUTUMN):
            forward = day_slots(expression, day)
            end = (dt.datetime(day.year, day.month, day.day, tzinfo=PARIS) + dt.timedelta(days=1)).astimezone(UTC)
            newest_first = cron.iter_until(expression, end - SECOND, PARIS)
            back = itertools.takewhile(lambda s, first=forward[0]: s >= first, newest_first)
            assert [s.astimezone(UTC) for s in back][::-1] == forward, (expression, day)


def test_slots_are_strictly_after_and_at_or_before_their_bound():
    at = dt.datetime(2030, 1, 1, 12, 5, tzinfo=UTC)
    assert cron.next_slot("*/5 * * * *", at) == at + dt.timedelta(minutes=5)
    assert cron.next_slot("*/5 * * * *", at - dt.timedelta(microseconds=1)) == at
    assert next(cron.iter_until("*/5 * * * *", at)) == at
    assert next(cron.iter_until("*/5 * * * *", at - dt.timedelta(microseconds=1))) == at - dt.timedelta(minutes=5)


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("* * * * * * *", "at most once a second"),
        ("every tuesday", "Invalid cron expression"),
        ("0 0 30 2 *", "Invalid cron expression"),
        ("", "text of 1 to 200"),
        ("0 0 * * *\x00", "NUL"),
    ],
)
def test_an_expression_that_cannot_be_a_schedule_is_refused_saying_why(expression, says):
    with pytest.raises(ValueError, match=says):
        cron.check(expression)


@pytest.mark.parametrize("name", ["Mars/Olympus", "../../etc/passwd", "", "Europe/Paris\x00"])
def test_an_unknown_time_zone_is_refused(name):
    with pytest.raises(ValueError, match="time zone"):
        cron.zone(name)


# -- the round's plan ---------------------------------------------------------------------------

NOW = dt.datetime(2030, 6, 1, 12, 0, 0, 400000, tzinfo=UTC)
LATE = dt.timedelta(seconds=16)


def every(seconds: int, *, since: dt.datetime, catch_up: str = "latest", overlap: str = "allow") -> object:
    return plan(f"*/{seconds} * * * * *", UTC, next_slot=since, now=NOW, late=LATE, catch_up=catch_up, overlap=overlap)


def test_a_round_makes_every_slot_since_the_last_one_and_the_next_within_a_second():
    """A round 5 s after the last, of a */3 s schedule, makes the slots between, not only the next."""
    since = dt.datetime(2030, 6, 1, 11, 59, 51, tzinfo=UTC)
    p = every(3, since=since)
    assert p.slots == [since + dt.timedelta(seconds=3 * n) for n in range(4)]  # :51 :54 :57 :00
    assert p.next_slot == dt.datetime(2030, 6, 1, 12, 0, 3, tzinfo=UTC) and p.missed_since is None
    ahead = every(1, since=dt.datetime(2030, 6, 1, 12, 0, 0, tzinfo=UTC))
    assert ahead.slots[-1] == NOW.replace(microsecond=0) + dt.timedelta(seconds=1)  # made AHEAD of its time
    assert ahead.slots[-1] - NOW < AHEAD


def test_overlap_skip_makes_no_slot_ahead_of_its_time():
    p = every(1, since=dt.datetime(2030, 6, 1, 12, 0, 0, tzinfo=UTC), overlap="skip")
    assert p.slots == [dt.datetime(2030, 6, 1, 12, 0, 0, tzinfo=UTC)]


def test_slots_missed_while_no_worker_ran_follow_catch_up():
    since = dt.datetime(2030, 6, 1, 11, 0, 0, tzinfo=UTC)  # an hour without a worker
    cut = NOW - LATE
    on_time = [s for s in (cut.replace(microsecond=0) + dt.timedelta(seconds=n) for n in range(1, 30)) if s <= NOW]
    latest = every(1, since=since, catch_up="latest")
    assert latest.missed_since == since
    assert latest.slots == [cut.replace(microsecond=0), *on_time, on_time[-1] + dt.timedelta(seconds=1)]
    none = every(1, since=since, catch_up="none")
    assert none.slots == [*on_time, on_time[-1] + dt.timedelta(seconds=1)]
    every_one = every(1, since=since, catch_up="all")
    missed = every_one.slots[: -len(none.slots)]
    assert len(missed) == MAX_CATCH_UP and missed[-1] == cut.replace(microsecond=0)  # the newest 1,000
    assert all(b - a == dt.timedelta(seconds=1) for a, b in itertools.pairwise(every_one.slots))  # oldest first
    few = every(60, since=dt.datetime(2030, 6, 1, 11, 55, tzinfo=UTC), catch_up="all")
    assert [s.minute for s in few.slots] == [55, 56, 57, 58, 59, 0]  # 11:55-11:59 missed, 12:00 on time


def test_a_slot_late_by_less_than_the_bound_is_made_whatever_catch_up_says():
    since = NOW.replace(microsecond=0) - dt.timedelta(seconds=10)  # a leader's failover, say
    assert len(every(1, since=since, catch_up="none").slots) == 12  # 10 late, now, and the next
    assert every(1, since=since, catch_up="none").missed_since is None
