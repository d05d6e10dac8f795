"""`python -m bench.http --pooler` runs green on the test database: every path served directly and
through PgBouncer (transaction mode), every answer a 2xx and every counted job a committed row, the
pooler on at most its pool of server connections. No speed is asserted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import pgbouncer
from reliableq.models import Job
from testproject import processes
from tests.support import queue_database_env

pytestmark = [pytest.mark.heavy, pytest.mark.slow, pytest.mark.nightly]  # wrk + pgbouncer: `pytest -m nightly`

ROOT = Path(__file__).resolve().parents[2]


def _needs(tool: str, present: bool) -> None:
    if not present:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed; .ci/run installs it (apt-get install {tool})")
        pytest.skip(f"{tool} is not installed (apt-get install {tool})")


@pytest.mark.timeout(240)
def test_http_bench_with_the_pooler_runs_green_and_reports_both(db_url: str) -> None:
    _needs("wrk", shutil.which("wrk") is not None)
    _needs("pgbouncer", pgbouncer.available())
    env = processes.child_env(DATABASE_URL=db_url, **queue_database_env())
    result = subprocess.run(
        [sys.executable, "-m", "bench.http", "--connections", "2", "--seconds", "1", "--reps", "2",
         "--batch", "5", "--pooler"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "**direct**" in out and "**PgBouncer (transaction, pool 4)**" in out, out
    assert out.count("| POST /v1/jobs / insert view (repetitions) |") == 2, out
    assert "Through PgBouncer (transaction, pool 4) / direct" in out, out
    # Server CPU per request, measured beside each rate: gunicorn's and the database's, never nothing.
    cpu = [float(ms) for ms in re.findall(r"\| server CPU per request, POST /v1/jobs \| ([\d.]+) \(", out)]
    assert len(cpu) == 2 and all(ms > 0 for ms in cpu), out
    assert out.count("| insert view / POST /v1/jobs, server CPU per request |") == 2, out
    assert "Every counted answer was a 2xx and every counted job is a committed row." in out, out
    assert not Job.objects.filter(queue__startswith="bench-http-").exists(), "the bench removes its rows"
