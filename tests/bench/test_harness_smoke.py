"""The benchmark harness in its smoke profile: it runs green, gates every run, and writes its report.

It starts its own PostgreSQL (.pgdata/bench-smoke), workers and gunicorn in a subprocess, as
`python -m bench` does; nothing here touches the tests' database. No speed is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.running import run_bench

# Not Django-version dependent (the Django 6.1 pass skips it), and minutes long: nightly, not in CI.
pytestmark = [pytest.mark.heavy, pytest.mark.nightly]

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / ".pgdata" / "bench-smoke"
SECTIONS = [
    "## Targets",
    "## Findings",
    "## Durable ingestion",
    "## Execution throughput",
    "## Ceilings",
    "## I/O-bound jobs",
    "## How handlers run: async, threads, processes",
    "## OpenTelemetry's cost",
    "## Latency from enqueue",
    "## Claim cost as finished jobs pile up",
    "## Long transactions",
    "## Soak",
    "## Workflows",
    "## Recovery after SIGKILL",
    "## Retry amplification",
    "## Through PgBouncer",
    "## A fleet of hosts",
    "## Correctness gate",
    "## Closing note",
]
PLOTS = [
    "ingestion.png",
    "throughput.png",
    "io.png",
    "latency.png",
    "pileup.png",
    "xmin.png",
    "soak.png",
    "recovery.png",
    "amplification.png",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smoke_profile_runs_green_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "results"
    # A hang guard: 3 to 6 minutes on the shared 2-core machine under a load of 5 to 8.
    result = run_bench(["--profile", "smoke", "--out", str(out)], data_dir=DATA_DIR, timeout=570)
    assert result.returncode == 0, result.stderr[-6000:]
    assert "GREEN" in result.stderr
    assert "[00:" in result.stderr  # progress lines while it runs

    report = (out / "report.md").read_text()
    positions = [report.find(heading) for heading in SECTIONS]
    assert all(p >= 0 for p in positions), [h for h, p in zip(SECTIONS, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    assert "all passed" in report
    assert "This scenario failed" not in report
    assert "measured once in this profile" in report  # smoke runs each point once: no outlier can be judged
    for plot in PLOTS:
        png = out / plot
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
        assert f"]({plot})" in report

    results = json.loads((out / "results.json").read_text())
    assert results["gate_passed"] is True
    assert results["checks"] > 50
    assert not results["errors"]
    assert results["findings"] == []
    assert results["machine"]["synchronous_commit"] == "on"
    pooler = results["sections"]["pooler"]
    assert 1 <= pooler["pgbouncer"]["server_connections"] <= pooler["config"]["pool_size"]
    held = results["sections"]["xmin"]["200/s, repeatable read"]
    assert [w["phase"] for w in held["windows"]][:3] == ["baseline", "held", "held"]
    assert all(w["claims"] > 0 for w in held["windows"])
    assert all(w["checkpoints"] >= 0 for w in held["windows"])
    control = results["sections"]["xmin"]["200/s, none"]  # the same phases with nothing held
    assert [w["phase"] for w in control["windows"]][:3] == ["baseline", "held", "held"]
    assert list(results["sections"]["xmin"]) == ["200/s, none", "200/s, repeatable read"]
    soak = results["sections"]["soak"]
    assert soak["samples"] and soak["wal_bytes_per_job"] > 0
    # Where the last sample's WAL went: the job table's own records are among it.
    assert any(part["relation"] == "reliableq_job" and part["bytes"] > 0 for part in soak["wal_breakdown"])
    fleet = results["sections"]["fleet"]
    assert list(fleet["by_processes"]) == ["1", "2"]
    assert all(point["calls"]["rescue"] >= 1 for point in fleet["by_processes"].values())
