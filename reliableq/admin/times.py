"""How the admin writes a time: to the second (milliseconds for attempts), in the site's time zone.

Django's default format stops at the minute, so three attempts a few seconds apart all read
"5:58 p.m." and the backoff between them is invisible.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone


def to_second(value: dt.datetime | None) -> str:
    if value is None:
        return "-"
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}"


def to_millisecond(value: dt.datetime | None) -> str:
    if value is None:
        return "-"
    local = timezone.localtime(value)
    return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d}"


def short(value: dt.datetime | None, now: dt.datetime) -> str:
    """For the list's narrow column: the time alone today, with the date otherwise."""
    if value is None:
        return "-"
    local, today = timezone.localtime(value), timezone.localtime(now)
    return f"{local:%H:%M:%S}" if local.date() == today.date() else f"{local:%Y-%m-%d %H:%M:%S}"


def seconds(delta: dt.timedelta) -> str:
    """A span as an operator reads it: 0.250s, 12.4s, 3m 05s, 2h 10m."""
    total = delta.total_seconds()
    if total < 10:
        return f"{total:.3f}s"
    if total < 60:
        return f"{total:.1f}s"
    if total < 3600:
        return f"{int(total // 60)}m {int(total % 60):02d}s"
    return f"{int(total // 3600)}h {int(total % 3600 // 60):02d}m"


def relative(value: dt.datetime, now: dt.datetime) -> str:
    """ "in 12.0s" or "4m 02s ago"."""
    if value >= now:
        return "in " + seconds(value - now)
    return seconds(now - value) + " ago"
