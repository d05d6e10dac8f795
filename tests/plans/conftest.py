from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from reliableq.queue import planguard

from . import tables
from .explain import Plan


@pytest.fixture
def plan_tables(transactional_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The queue's tables with autovacuum off; emptied and analyzed empty again afterwards.

    The states analyze moments before the guard looks, so its once-a-minute limit is lifted here.
    """
    monkeypatch.setattr(planguard, "REANALYZE_SECONDS", 0.0)
    with tables.autovacuum_off():
        yield
        tables.truncate()
        tables.analyze()


class Figures:
    """The figures of each measured statement: printed with the test's output, and appended as JSON
    lines to $RELIABLEQ_PLANS_REPORT when it is set (the closing note of the storage issue uses them)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, object]] = []

    def add(self, *, state: str, statement: str, phase: str, plan: Plan) -> None:
        self.rows.append(
            {
                "state": state,
                "statement": statement,
                "phase": phase,
                "sql": " ".join(plan.sql.split())[:60],
                "buffers": plan.buffers,
                "ms": round(plan.ms, 2),
                "job_rows": plan.rows_read(tables.JOB),
                "attempt_rows": plan.rows_read(tables.ATTEMPT),
                "scans": ", ".join(plan.scans(tables.JOB)),
            }
        )

    def table(self) -> str:
        lines = [
            f"{'state':24} {'statement':24} {'phase':12} {'buffers':>9} {'ms':>9} {'job rows':>9} {'att rows':>9}"
            "  job scans"
        ]
        for r in self.rows:
            lines.append(
                f"{r['state']:24} {r['statement']:24} {r['phase']:12} {r['buffers']:>9} {r['ms']:>9} "
                f"{r['job_rows']:>9} {r['attempt_rows']:>9}  {r['scans']}"
            )
        return "\n".join(lines)


@pytest.fixture
def figures() -> Iterator[Figures]:
    collected = Figures()
    yield collected
    print("\n" + collected.table())
    path = os.environ.get("RELIABLEQ_PLANS_REPORT")
    if path:
        with open(path, "a") as report:
            for row in collected.rows:
                report.write(json.dumps(row) + "\n")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Plans depend on PostgreSQL, not on Django's version: the Django 6.1 pass skips them (heavy)."""
    for item in items:
        if "tests/plans/" in str(item.fspath):
            item.add_marker(pytest.mark.heavy)
