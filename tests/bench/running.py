"""Running a benchmark command as its user does, for the smoke tests: in a subprocess from the
repository's root, on the harness's own PostgreSQL in a data dir of its own, stopped afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The tests' database settings stay out: the command starts and configures its own server. So does
# the coverage tracer where `untraced`: it slows the worker's Python far more than a bare loop's.
TESTS_ONLY = ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
TRACER = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")


def run_bench(
    args: Sequence[str], *, data_dir: Path, timeout: float, module: str = "bench", untraced: bool = False
) -> subprocess.CompletedProcess[str]:
    """`python -m <module> <args> --data-dir <data_dir>`; its server is stopped whatever happens."""
    drop = TESTS_ONLY + (TRACER if untraced else ())
    env = {k: v for k, v in os.environ.items() if k not in drop}
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *args, "--data-dir", str(data_dir)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    finally:
        from testproject import embedded

        embedded.stop(data_dir)
