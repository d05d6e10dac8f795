"""bench.walfloor in miniature: each layout is built, runs jobs, and has its WAL counted and split.

It starts the harness's own PostgreSQL (18: uuidv7() and pg_walinspect) in a data dir of its own,
as `python -m bench.walfloor` does. Byte counts are not asserted, except the one thing the tool
exists to show and that holds on any machine: a layout that indexes a job's row at fewer of its
versions writes fewer index records per job.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.bench.running import run_bench

pytestmark = pytest.mark.heavy


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_layout_runs_and_its_wal_is_split_by_relation(tmp_path: Path) -> None:
    data_dir = tmp_path / "pg"
    result = run_bench(
        ["--jobs", "800", "--warmup", "200", "--rounds", "1"], data_dir=data_dir, timeout=280, module="bench.walfloor"
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    rows = dict(re.findall(r"^\| (today|today, no listings|narrow|history in the row) \| ([\d,]+) \|", out, re.M))
    assert set(rows) == {"today", "today, no listings", "narrow", "history in the row"}, out
    assert all(int(v.replace(",", "")) > 0 for v in rows.values())

    def index_records(layout: str) -> float:
        section = out.split(f"\n{layout}, by relation")[1].split("\n\n", 2)[1]
        found = re.findall(r"^- walfloor\.(\w+): ([\d.]+) records", section, re.M)
        assert found, section
        return sum(float(n) for name, n in found if name not in ("job", "attempt", "ready", "lease", "attempt_id_seq"))

    # Every listing index is written at each of a job's three versions today, once in the narrow layout.
    assert index_records("narrow") < index_records("today")
    assert index_records("today, no listings") < index_records("today")
    # With no attempt table and the claim out of the job's row, fewer index records than narrow.
    assert index_records("history in the row") < index_records("narrow")
