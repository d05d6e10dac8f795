"""`python -m bench.httpcost` counts instructions per request under callgrind and reports them
against the plain insert view; every request it makes must be answered 202. No cost is asserted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reliableq.models import Job
from testproject import processes
from tests.support import queue_database_env

pytestmark = [pytest.mark.heavy, pytest.mark.slow, pytest.mark.nightly]  # valgrind: minutes; `pytest -m nightly`

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_httpcost_counts_each_path_and_leaves_no_rows(db_url: str) -> None:
    if not shutil.which("valgrind"):
        if os.environ.get("CI"):
            pytest.fail("valgrind is not installed; .ci/run installs it (apt-get install valgrind)")
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    env = processes.child_env(DATABASE_URL=db_url, **queue_database_env())
    result = subprocess.run(
        [sys.executable, "-m", "bench.httpcost", "--requests", "3", "--paths", "api"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # One path keeps this under a minute (each run under callgrind starts Django afresh).
    found = re.search(r"\| POST /v1/jobs \| ([\d.]+) M \| - \|", result.stdout)
    assert found and float(found.group(1)) > 0.1, result.stdout  # a request is at least 100,000 instructions
    assert not Job.objects.filter(queue="bench-httpcost").exists(), "the bench removes its rows"


def test_an_unknown_path_is_refused_by_name(db_url: str) -> None:
    env = processes.child_env(DATABASE_URL=db_url, **queue_database_env())
    result = subprocess.run(
        [sys.executable, "-m", "bench.httpcost", "--paths", "api,nope"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "unknown path(s) ['nope']" in result.stderr, result.stderr
