"""What the scenario modules share: the report's Section, Markdown tables, number formats, child processes' env."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import child_env, percentile


@dataclass
class Section:
    key: str
    title: str
    intro: str = ""
    tables: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def table(header: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def fmt_ratio(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.2f}x"


def fmt_pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.0f}%"


def fmt_ms_percentile(pooled: Sequence[float], per_rep: Sequence[Sequence[float]], q: float) -> str:
    """The q-th percentile of every sample in ms, with the range of each repetition's own q-th beside it."""
    text = f"{1000 * percentile(pooled, q):.1f}"
    if len(per_rep) < 2:
        return text
    mine = [1000 * percentile(samples, q) for samples in per_rep]
    return f"{text} ({min(mine):.1f}–{max(mine):.1f})"


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def env(**extra: Any) -> dict[str, str]:
    return child_env(**extra)


def named_url(url: str, application_name: str) -> str:
    """The same DATABASE_URL under an application name: how the server tells one fleet's connections apart."""
    from testproject import dburl

    db = dburl.parse(url)
    db["OPTIONS"] = {**db["OPTIONS"], "application_name": application_name}
    return dburl.build(db)
