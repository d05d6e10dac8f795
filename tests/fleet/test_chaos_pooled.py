"""The quick chaos profile's first seed behind PgBouncer in transaction mode: 3 worker processes
x 8 slots and the API on a pool of 4 server connections, LISTEN direct, every fault injected.

PostgreSQL, not the pooler, counts the pooler's connections: PgBouncer logs in as a role of its
own, and the run samples pg_stat_activity by that role every 0.2 s.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import pgbouncer
from tests.chaos.runner import POOLED, ChaosRun, reproduce_command

# A minute and more: nightly (`pytest -m nightly`); tests/fleet/test_prepared_statements.py runs workers
# behind a one-connection pooler in CI.
pytestmark = [pytest.mark.slow, pytest.mark.chaos, pytest.mark.nightly]


@pytest.mark.timeout(240)
def test_chaos_through_a_transaction_pooler_keeps_every_invariant_on_four_server_connections(tmp_path: Path) -> None:
    if not pgbouncer.available():
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed; .ci/run installs it (apt-get install pgbouncer)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    outcome = ChaosRun(1, POOLED, log_dir=tmp_path).run()
    print(
        f"pooled seed 1: {outcome.jobs} jobs in {outcome.seconds:.0f}s, statuses {dict(outcome.statuses)}, "
        f"faults {dict(outcome.faults)}, peak server connections {outcome.peak_pooled}, "
        f"direct LISTEN {outcome.peak_listening}, {outcome.samples} samples"
    )
    assert outcome.ok, "\n".join(
        [*outcome.report.violations, f"reproduce: {reproduce_command(1, POOLED)}", f"logs: {tmp_path}"]
    )
    assert sum(outcome.statuses.values()) == (
        outcome.jobs + outcome.workflow_jobs + outcome.fair_jobs + outcome.http_jobs
    )
    # The pool was used and never exceeded, by PostgreSQL's count.
    assert outcome.samples >= 50
    assert 1 <= outcome.peak_pooled <= POOLED.pool_size
    # LISTEN went direct: the server saw the workers listening, and no worker said it hears nothing.
    assert outcome.peak_listening >= 1
    assert outcome.deaf_workers == 0
    # The run was chaotic, or passing proves nothing.
    assert outcome.faults["pg_restart"] == 1
    assert outcome.faults["sigkill"] >= 2
    assert outcome.faults["terminate_backends"] >= 1
