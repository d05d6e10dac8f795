"""The queue dashboard's charts as geometry: pure functions from stats' numbers to SVG shapes.

No SQL and no markup here. stats.py reads the numbers; the dashboard template draws these shapes
as inline SVG (escaped as any template output), so there is no JavaScript and no chart library.
Coordinates are in the SVG's own user units (its viewBox); the browser scales the drawing.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils import timezone

from ..queue.stats import FINISHED_STATUSES, BacklogPoint, FinishedMinute, KindDuration

WIDTH = 720.0
HEIGHT = 190.0
# Room for the y axis' labels on the left and the time labels at the bottom.
LEFT, RIGHT, TOP, BOTTOM = 44.0, 8.0, 10.0, 22.0
ROW = 24.0  # one kind's row in the duration chart
LABEL_WIDTH = 210.0  # the kind names' column in the duration chart
MAX_KIND_CHARS = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    series: str  # a CSS class suffix: the colour
    title: str  # the tooltip: what this shape stands for, in words


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    position: float  # y for the value axis, x for the time axis
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeChart:
    """A chart over the last hour's minutes: stacked bars, or a line with the area under it."""

    width: float
    height: float
    left: float
    right: float  # x of the plot's right edge
    top: float
    bottom: float  # y of the plot's baseline
    label_x: float  # where the value axis' labels end
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    bars: list[Rect]
    line: str  # the polyline's points ("x,y x,y ..."), "" for a bar chart
    area: str  # the polygon under the line, "" for a bar chart


@dataclass(frozen=True, slots=True, kw_only=True)
class DurationRow:
    kind: str  # shown, shortened when long
    full_kind: str
    bar: Rect
    y: float  # the text baseline of the row
    value_x: float  # where the value's text starts, just after the bar
    value: str  # "1.23 s"
    attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DurationChart:
    width: float
    height: float
    bar_left: float
    label_x: float  # where the kind names end (right-aligned)
    rows: list[DurationRow]


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least `value` (1 for nothing)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)


def _number(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def hhmm(moment: dt.datetime) -> str:
    """A minute as the charts and their tables show it: local time, hours and minutes."""
    return timezone.localtime(moment).strftime("%H:%M")


def _frame(count: int, top_value: float) -> tuple[float, float, list[Tick]]:
    """The width of one minute's slot, the scale (units per value) and the value axis' ticks."""
    slot = (WIDTH - LEFT - RIGHT) / max(count, 1)
    scale = (HEIGHT - TOP - BOTTOM) / top_value
    ticks = [
        Tick(position=round(HEIGHT - BOTTOM - v * scale, 1), label=_number(v)) for v in (0.0, top_value / 2, top_value)
    ]
    return slot, scale, ticks


def _time_ticks(minutes: Sequence[dt.datetime], slot: float, *, centred: bool) -> list[Tick]:
    """A label every ten minutes (on the clock), under its minute's slot."""
    ticks = []
    for i, minute in enumerate(minutes):
        label = hhmm(minute)
        if label.endswith("0"):
            ticks.append(Tick(position=round(LEFT + (i + 0.5 if centred else i) * slot, 1), label=label))
    return ticks


def finished_chart(minutes: Sequence[FinishedMinute]) -> TimeChart:
    """Stacked bars, one per minute: SUCCEEDED at the bottom, then DEAD, then CANCELLED."""
    top_value = nice_ceiling(max((sum(m.counts.values()) for m in minutes), default=0))
    slot, scale, y_ticks = _frame(len(minutes), top_value)
    gap = min(2.0, slot / 4)
    bars = []
    for i, minute in enumerate(minutes):
        base = HEIGHT - BOTTOM
        for status in FINISHED_STATUSES:
            n = minute.counts.get(status, 0)
            if not n:
                continue
            height = n * scale
            base -= height
            bars.append(
                Rect(
                    x=round(LEFT + i * slot + gap / 2, 1),
                    y=round(base, 1),
                    width=round(slot - gap, 1),
                    height=round(height, 1),
                    series=status.lower(),
                    title=f"{hhmm(minute.minute)}: {n} {status}",
                )
            )
    x_ticks = _time_ticks([m.minute for m in minutes], slot, centred=True)
    return TimeChart(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        right=WIDTH - RIGHT,
        top=TOP,
        bottom=HEIGHT - BOTTOM,
        label_x=LEFT - 6,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        bars=bars,
        line="",
        area="",
    )


def backlog_chart(points: Sequence[BacklogPoint]) -> TimeChart:
    """A line through each minute's backlog, at the minute's end, with the area under it filled."""
    top_value = nice_ceiling(max((p.waiting for p in points), default=0))
    slot, scale, y_ticks = _frame(len(points), top_value)
    base = HEIGHT - BOTTOM
    xy = [(round(LEFT + (i + 1) * slot, 1), round(base - p.waiting * scale, 1)) for i, p in enumerate(points)]
    line = " ".join(f"{x},{y}" for x, y in xy)
    area = f"{xy[0][0]},{base} {line} {xy[-1][0]},{base}" if xy else ""
    # Each minute gets an invisible full-height column whose tooltip tells its value.
    columns = [
        Rect(
            x=round(LEFT + i * slot, 1),
            y=TOP,
            width=round(slot, 1),
            height=base - TOP,
            series="hover",
            title=f"{hhmm(p.minute)}: {p.waiting} waiting",
        )
        for i, p in enumerate(points)
    ]
    x_ticks = _time_ticks([p.minute for p in points], slot, centred=False)
    return TimeChart(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        right=WIDTH - RIGHT,
        top=TOP,
        bottom=base,
        label_x=LEFT - 6,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        bars=columns,
        line=line,
        area=area,
    )


def duration_chart(kinds: Sequence[KindDuration]) -> DurationChart:
    """One horizontal bar per kind, its length the kind's p95, slowest first (as stats orders them)."""
    top_value = max((k.p95_seconds for k in kinds), default=0.0) or 1.0
    room = WIDTH - LABEL_WIDTH - 150.0  # leave room after the longest bar for its value
    rows = []
    for i, k in enumerate(kinds):
        y = TOP + i * ROW
        short = k.kind if len(k.kind) <= MAX_KIND_CHARS else k.kind[: MAX_KIND_CHARS - 1] + "…"
        width = max(1.0, k.p95_seconds / top_value * room)
        rows.append(
            DurationRow(
                kind=short,
                full_kind=k.kind,
                y=round(y + ROW * 0.65, 1),
                value=seconds(k.p95_seconds),
                value_x=round(LABEL_WIDTH + width + 6, 1),
                attempts=k.attempts,
                bar=Rect(
                    x=LABEL_WIDTH,
                    y=round(y + 4, 1),
                    width=round(width, 1),
                    height=ROW - 8,
                    series="duration",
                    title=f"{k.kind}: p95 {seconds(k.p95_seconds)} over {attempts(k.attempts)}",
                ),
            )
        )
    return DurationChart(
        width=WIDTH, height=TOP * 2 + max(len(rows), 1) * ROW, bar_left=LABEL_WIDTH, label_x=LABEL_WIDTH - 8, rows=rows
    )


def seconds(value: float) -> str:
    """A duration for people: 3 significant digits, in ms below a second, whole seconds from 100 s."""
    if value < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s" if value < 100 else f"{value:.0f} s"


def attempts(n: int) -> str:
    return f"{n} attempt" if n == 1 else f"{n} attempts"


# -- the words that go with the pictures (each chart's <desc>, read by screen readers) -------------


def finished_summary(minutes: Sequence[FinishedMinute]) -> str:
    totals = {s: sum(m.counts.get(s, 0) for m in minutes) for s in FINISHED_STATUSES}
    if not any(totals.values()):
        return "No job finished in the last hour."
    busiest = max(minutes, key=lambda m: sum(m.counts.values()))
    parts = ", ".join(f"{n} {s}" for s, n in totals.items())
    return (
        f"In the last hour: {parts}. The busiest minute, {hhmm(busiest.minute)}, "
        f"finished {sum(busiest.counts.values())}."
    )


def backlog_summary(points: Sequence[BacklogPoint]) -> str:
    if not points:
        return "No backlog data."
    peak = max(points, key=lambda p: p.waiting)
    return (
        f"Waiting now: {points[-1].waiting}. Highest in the last hour: {peak.waiting} at {hhmm(peak.minute)}; "
        f"lowest: {min(p.waiting for p in points)}."
    )


def duration_summary(kinds: Sequence[KindDuration]) -> str:
    if not kinds:
        return "No attempt finished in the last hour."
    return (
        "p95 handler duration: "
        + "; ".join(f"{k.kind} {seconds(k.p95_seconds)} ({attempts(k.attempts)})" for k in kinds)
        + "."
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Panel:
    """One chart with its words: the summary a screen reader reads, and every number as a table."""

    slug: str  # the HTML id prefix
    title: str
    caption: str  # what the chart means, shown under it
    summary: str
    chart: TimeChart | DurationChart
    headers: list[str]
    rows: list[list[str]]


def panels(
    finished: Sequence[FinishedMinute], backlog: Sequence[BacklogPoint], durations: Sequence[KindDuration]
) -> list[Panel]:
    """The dashboard's three charts, ready for the template."""
    return [
        Panel(
            slug="finished",
            title="Jobs finished per minute",
            caption="Jobs that reached SUCCEEDED, DEAD or CANCELLED in each minute of the last hour, "
            "stacked by that status (a replayed job counts again when it finishes again).",
            summary=finished_summary(finished),
            chart=finished_chart(finished),
            headers=["minute", *FINISHED_STATUSES],
            rows=[[hhmm(m.minute), *(str(m.counts.get(s, 0)) for s in FINISHED_STATUSES)] for m in finished],
        ),
        Panel(
            slug="backlog",
            title="Backlog",
            caption="Due jobs waiting for their first attempt at the end of each minute, rebuilt from each "
            "job's due time and its first attempt's start (jobs waiting to retry are not counted).",
            summary=backlog_summary(backlog),
            chart=backlog_chart(backlog),
            headers=["minute", "waiting"],
            rows=[[hhmm(p.minute), str(p.waiting)] for p in backlog],
        ),
        Panel(
            slug="durations",
            title="p95 handler duration by kind",
            caption="The 95th percentile of how long each kind's handler ran, over the attempts started in "
            "the last hour that have finished (attempts whose worker went away are left out).",
            summary=duration_summary(durations),
            chart=duration_chart(durations),
            headers=["kind", "p95", "attempts"],
            rows=[[k.kind, seconds(k.p95_seconds), str(k.attempts)] for k in durations],
        ),
    ]
