"""Cron expressions: their slots in a time zone, forward and backward. A leaf module (cronsim only),
so the registry can check an expression when a handler is declared without importing the scheduler.

Slots across a daylight-saving change follow Debian cron (and cronsim): an expression with a fixed
minute and hour ("30 2 * * *") names wall-clock times, so a time the clock skips runs once, when the
clock jumps, and a time the clock repeats runs once, at its first occurrence; an expression with a
wildcard minute or hour ("*/10 * * * *", "0 * * * *") names elapsed time, so it runs in each real
minute or hour that matches, twice in a repeated hour and not at all in a skipped one. cronsim does
the first only for five fields; here six-field expressions get it too.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Iterator

from cronsim import CronSim, CronSimError

UTC = dt.timezone.utc
SECOND = dt.timedelta(seconds=1)
MAX_EXPRESSION_CHARS = 200


def check(expression: object) -> str:
    """The expression, if it is five fields (or six, seconds first) that fire some day; else ValueError saying why."""
    if not isinstance(expression, str) or not expression.strip() or len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"A cron expression is text of 1 to {MAX_EXPRESSION_CHARS} characters.")
    if "\x00" in expression:
        raise ValueError("A cron expression cannot contain the NUL character.")
    fields = expression.split()
    if len(fields) > 6:
        raise ValueError(
            f"Cron expression {expression!r} has {len(fields)} fields: a schedule fires at most once a second, "
            "so it has five fields (minute hour day month weekday) or six with seconds first."
        )
    try:
        CronSim(expression, dt.datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ValueError(f"Invalid cron expression {expression!r}: {exc}") from None
    if next(iter_after(expression, dt.datetime.now(UTC)), None) is None:
        raise ValueError(f"Cron expression {expression!r} never fires.")
    return expression


def zone(name: object) -> zoneinfo.ZoneInfo:
    """The IANA time zone `name` ("Europe/Paris", "UTC"); ValueError if there is none by that name."""
    if not isinstance(name, str) or not name or len(name) > 64 or "\x00" in name:
        raise ValueError(f"{name!r} is not an IANA time zone name (like 'Europe/Paris' or 'UTC').")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"Unknown time zone {name!r}: use an IANA name, like 'Europe/Paris' or 'UTC'.") from None


def next_slot(expression: str, after: dt.datetime, tz: dt.tzinfo = UTC) -> dt.datetime:
    """The first slot strictly after `after` (in `tz`); ValueError for an invalid expression or one that never fires."""
    try:
        found = next(iter_after(expression, after, tz), None)
    except CronSimError as exc:
        raise ValueError(f"Invalid cron expression {expression!r}: {exc}") from None
    if found is None:
        raise ValueError(f"Cron expression {expression!r} never fires.")
    return found


def iter_after(expression: str, after: dt.datetime, tz: dt.tzinfo = UTC) -> Iterator[dt.datetime]:
    """The slots strictly after `after`, oldest first, each an aware time in `tz`."""
    return _distinct(_candidates(expression, after, tz, reverse=False), after, reverse=False)


def iter_until(expression: str, until: dt.datetime, tz: dt.tzinfo = UTC) -> Iterator[dt.datetime]:
    """The slots at or before `until`, newest first, each an aware time in `tz`."""
    return _distinct(_candidates(expression, until, tz, reverse=True), until, reverse=True)


def wall_clock(expression: str) -> bool:
    """Whether the expression names wall-clock times (a fixed minute and hour) rather than elapsed time."""
    fields = expression.split()
    minute, hour = fields[-5], fields[-4]
    return not minute.startswith("*") and not hour.startswith("*")


def _candidates(expression: str, at: dt.datetime, tz: dt.tzinfo, *, reverse: bool) -> Iterator[dt.datetime]:
    # Backward, start a second later with no microseconds: cronsim then yields slots at or before `at`.
    start = (at + SECOND).replace(microsecond=0) if reverse else at
    if tz is UTC or not wall_clock(expression):
        yield from CronSim(expression, start.astimezone(tz), reverse=reverse)
        return
    naive = start.astimezone(tz).replace(tzinfo=None)
    for local in CronSim(expression, naive, reverse=reverse):
        yield _instant(local, tz)


def _distinct(candidates: Iterator[dt.datetime], bound: dt.datetime, *, reverse: bool) -> Iterator[dt.datetime]:
    """Strictly after `bound` (or, backward, at or before it), each instant once."""
    # Compared in UTC: Python compares two times of one tzinfo by their wall clocks, fold ignored.
    bound = bound.astimezone(UTC)
    last: dt.datetime | None = None
    for slot in candidates:
        instant = slot.astimezone(UTC)
        beyond = instant > bound if reverse else instant <= bound
        repeated = last is not None and (instant >= last if reverse else instant <= last)
        if beyond or repeated:
            continue
        last = instant
        yield slot


def _instant(local: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """A wall-clock time as an instant: its first occurrence if the clock repeats it, the moment the
    clock jumps if it skips it."""
    first = local.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == local:
        return first.astimezone(tz)
    # Skipped: the earliest instant whose local time is past it lies between the two readings.
    low, high = sorted((first.astimezone(UTC), local.replace(tzinfo=tz, fold=1).astimezone(UTC)))
    while high - low > SECOND:
        middle = low + (high - low) // 2
        if middle.astimezone(tz).replace(tzinfo=None) < local:
            low = middle
        else:
            high = middle
    return high.replace(microsecond=0).astimezone(tz)
