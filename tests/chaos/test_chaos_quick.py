"""The quick chaos profile: 3 seeds, 1,200 jobs, 3 workers, every fault type (a failover to the
synchronous standby among them; crashes inside durable steps; emits that wake waiting jobs), then
PostgreSQL is checked.

CI runs seed 1; seeds 2 and 3 run with the nightly profile (`pytest -m nightly`), as does the long
profile (`python -m tests.chaos --seeds 20`), to keep CI within its half hour."""

from __future__ import annotations

from pathlib import Path

import pytest

from .runner import QUICK, ChaosRun, reproduce_command

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


@pytest.mark.parametrize(
    "seed", [pytest.param(seed, marks=() if seed == 1 else pytest.mark.nightly) for seed in range(1, QUICK.seeds + 1)]
)
def test_seeded_chaos_leaves_every_invariant_intact(seed: int, tmp_path: Path) -> None:
    outcome = ChaosRun(seed, QUICK, log_dir=tmp_path).run()
    print(
        f"seed {seed}: {outcome.jobs} jobs in {outcome.seconds:.0f}s, statuses {dict(outcome.statuses)}, "
        f"faults {dict(outcome.faults)}"
    )
    assert outcome.ok, "\n".join(
        [*outcome.report.violations, f"reproduce: {reproduce_command(seed, QUICK)}", f"logs: {tmp_path}"]
    )
    # The run must really have been chaotic, or passing proves nothing.
    assert outcome.faults["pg_restart"] == 1
    assert outcome.faults["failover"] == QUICK.failovers == 1
    assert outcome.http_jobs > 0 and outcome.report.checked["acknowledged_present"] > outcome.jobs
    assert outcome.faults["sigkill"] >= 2
    assert outcome.faults["sigstop"] >= 1
    assert outcome.faults["terminate_backends"] >= 1
    assert outcome.faults["pause_queue"] == 1 and outcome.faults["cancel_running"] >= 2
    assert outcome.faults["kill_child"] >= 1, "no child process was killed"
    assert outcome.report.checked["isolated_lease_outlives_a_dead_child"] > 0
    assert outcome.report.checked["fair_turns"] > 0
    assert outcome.report.checked["member_after_upstream"] > 0 and outcome.faults["replayed_members"] >= 1
    # Durable steps: steps recorded (and checked against every run of their functions), waits woken by
    # the driver's emits.
    assert outcome.report.checked["step_recorded_runs_once"] > 0
    assert outcome.faults["emitted"] > 0 and outcome.faults["woken_by_emits"] > 0
    assert sum(outcome.statuses.values()) == (
        outcome.jobs + outcome.workflow_jobs + outcome.fair_jobs + outcome.http_jobs + outcome.step_jobs
    )
