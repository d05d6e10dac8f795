"""python manage.py demo_steps, run as a user runs it, against the test database."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from testproject.processes import ROOT
from tests.support import worker_env

pytestmark = [pytest.mark.slow]


def test_the_steps_demo_kills_a_worker_between_two_steps_and_each_step_runs_once(db_url: str) -> None:
    demo = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "demo_steps"],
        cwd=ROOT,
        env=worker_env(db_url),
        capture_output=True,
        text=True,
        timeout=120,  # the demo gives up by itself after 90 s
    )
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output
    assert "worker-A recorded ['reserve', 'pack'] and was SIGKILLed" in output, output
    # Runs counted from PostgreSQL: once each; the first two recorded by the killed attempt.
    assert re.search(r"reserve\s+1  attempt 1 \(worker-A\)", output), output
    assert re.search(r"pack\s+1  attempt 1 \(worker-A\)", output), output
    assert re.search(r"ship\s+1  attempt 2 \(worker-B\)", output), output
    assert "all processes stopped" in output
