"""The fairness scenario in miniature: it runs green, gates every run, and fair claims start the small
tenants before FIFO does (FIFO waits for the whole flood, fair claims for a round: on any machine).

It starts the harness's own PostgreSQL in a data dir of its own, workers in subprocesses, as
`python -m bench --only fairness` does; nothing here touches the tests' database.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.running import run_bench

# Minutes on the shared 2-core machine, and not Django-version dependent: nightly, as its neighbours.
pytestmark = [pytest.mark.heavy, pytest.mark.nightly]

pytest.importorskip("matplotlib")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_fairness_scenario_runs_green_and_fair_claims_start_small_tenants_first(tmp_path: Path) -> None:
    out = tmp_path / "results"
    data_dir = tmp_path / "pg"
    result = run_bench(
        ["--profile", "smoke", "--only", "fairness", "--no-peers", "--set", "reps=2", "--out", str(out)],
        data_dir=data_dir, timeout=380,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-6000:]
    assert "GREEN" in result.stderr
    report = (out / "report.md").read_text()
    assert "## Fair share: one tenant's flood and many small tenants" in report
    data = json.loads((out / "results.json").read_text())["sections"]["fairness"]
    assert len(data["delays_s"]["fair"]) == len(data["delays_s"]["fifo"]) == 2
    assert max(max(rep) for rep in data["delays_s"]["fair"]) < min(max(rep) for rep in data["delays_s"]["fifo"])
