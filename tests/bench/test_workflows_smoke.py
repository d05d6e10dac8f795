"""The workflows scenario in miniature: it runs green, gates every run, and reports each repetition.

It starts the harness's own PostgreSQL in a data dir of its own, workers in subprocesses, as
`python -m bench --only workflows` does; nothing here touches the tests' database. No speed is
asserted, only what holds on any machine: a callback is created in the transaction that finished
its workflow, and starts after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.running import run_bench

# Minutes on the shared 2-core machine, and not Django-version dependent: nightly, as its neighbours.
pytestmark = [pytest.mark.heavy, pytest.mark.nightly]

pytest.importorskip("matplotlib")

REPS = 2


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_workflows_scenario_runs_green_and_reports_every_repetition(tmp_path: Path) -> None:
    out = tmp_path / "results"
    data_dir = tmp_path / "pg"
    result = run_bench(
        ["--profile", "smoke", "--only", "workflows", "--no-peers", "--set", f"reps={REPS}",
         "--set", "workflow_members=60", "--set", "workflow_chain=20", "--out", str(out)],
        data_dir=data_dir, timeout=380,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-6000:]
    assert "GREEN" in result.stderr

    report = (out / "report.md").read_text()
    assert "## Workflows: fan-in, chain, callbacks" in report
    assert "This scenario failed" not in report
    assert "60 independent jobs against a workflow of 60: 59 members and a report after them" in report

    results = json.loads((out / "results.json").read_text())
    assert results["gate_passed"] is True
    assert not results["errors"]
    section = results["sections"]["workflows"]
    assert len(section["independent"]["values"]) == len(section["fan_in"]["values"]) == REPS
    assert len(section["paired_ratios"]) == len(section["chain"]) == REPS
    assert all(link["ms_per_link"] > 0 and link["gap_p50_ms"] >= 0 for link in section["chain"])
    callbacks = section["callbacks"]
    assert [c["workflow"] for c in callbacks] == ["fan-in"] * REPS + ["chain"] * REPS
    # created_at and the workflow's finished_at are now() of one transaction; the start comes after.
    assert all(c["created_ms"] == 0 and c["after_workflow_ms"] >= 0 for c in callbacks)
    targets = {t["target"]: t for t in results["targets"]}
    fan_in = targets[
        "a workflow of 60 (a fan-in of 59 and a report) vs as many independent jobs, same fleet, alternating"
    ]
    chain = targets["a chain of 20 members: time per link"]
    assert fan_in["value"] > 0 and fan_in["goal"] == 0.80 and fan_in["range"] is not None
    assert chain["value"] > 0 and chain["goal"] == 5.0 and chain["unit"] == "ms"
