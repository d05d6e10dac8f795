"""Outliers: a repetition far below its siblings is a finding of its own, never folded into a median.

Issue 12 found a two-minute plan collapse in a run whose repetition 2 made 255 jobs/s against
7,325 and 8,130 for its siblings; the report quoted the median, 7,325, and nothing else. So every
repeated point is checked here, and each outlier is listed with the parameters of its run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .core import Summary

# A repetition below this fraction of the median of its siblings is an outlier.
THRESHOLD = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Outlier:
    scenario: str
    params: Mapping[str, Any]  # what was measured: system, configuration, unit
    repetition: int  # 1-based, as in the gate's run names ("... rep 2")
    value: float
    siblings: tuple[float, ...]  # the same point's other repetitions, in order

    @property
    def sibling_median(self) -> float:
        return statistics.median(self.siblings)

    @property
    def unit(self) -> str:
        return str(self.params.get("unit", ""))

    def describe(self) -> str:
        """The measured point in words: 'system ReliableQ, job noop, workers 2 x 16'."""
        return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in self.params.items() if k != "unit")

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "params": dict(self.params),
            "repetition": self.repetition,
            "value": self.value,
            "siblings": list(self.siblings),
            "sibling_median": self.sibling_median,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Review:
    outliers: list[Outlier]
    checked: int  # measured points with two repetitions or more: the ones that can have an outlier


def outliers(scenario: str, summary: Summary) -> list[Outlier]:
    """Return every repetition of `summary` below THRESHOLD times the median of the others."""
    found = []
    for i, value in enumerate(summary.values):
        siblings = tuple(summary.values[:i] + summary.values[i + 1 :])
        if not siblings or math.isnan(value):
            continue
        if value < THRESHOLD * statistics.median(siblings):
            found.append(
                Outlier(
                    scenario=scenario, params=dict(summary.params), repetition=i + 1, value=value, siblings=siblings
                )
            )
    return found


def review(measured: Iterable[tuple[str, Summary]]) -> Review:
    """Check every (scenario, repeated point) pair of a run."""
    measured = list(measured)
    found = [o for scenario, summary in measured for o in outliers(scenario, summary)]
    return Review(outliers=found, checked=sum(1 for _, s in measured if len(s.values) >= 2))


def markdown(result: Review) -> str:
    """The report's Findings section."""
    lines = ["## Findings", ""]
    if not result.checked:
        lines.append(
            "Every point was measured once in this profile, so no repetition has siblings to be compared "
            "with (the quick and full profiles repeat every point)."
        )
        return "\n".join(lines)
    if not result.outliers:
        points = "1 measured point" if result.checked == 1 else f"{result.checked} measured points"
        lines.append(
            f"No repetition fell below {THRESHOLD:.0%} of the median of its siblings "
            f"({points} with two or more repetitions)."
        )
        return "\n".join(lines)
    lines += [
        f"{len(result.outliers)} repetition(s) below {THRESHOLD:.0%} of the median of their siblings (the "
        f"same point's other repetitions; {result.checked} points checked). Each passed the correctness "
        "gate and sits inside its point's range above; the median alone would hide it.",
        "",
        "| scenario | measured point | repetition | value | median of its siblings | fraction | siblings |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for o in result.outliers:
        lines.append(
            f"| {o.scenario} | {o.describe()} | {o.repetition} | {o.value:,.0f} {o.unit} | "
            f"{o.sibling_median:,.0f} {o.unit} | {o.value / o.sibling_median:.0%} | "
            f"{', '.join(f'{v:,.0f}' for v in o.siblings)} |"
        )
    return "\n".join(lines)
