"""The README's test command leaves nothing running: a pytest run that had to start the embedded
PostgreSQL (and started workers and a server) stops all of it when it ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # not Django-version dependent: the Django 6.1 pass skips it

ROOT = Path(__file__).resolve().parent.parent
# A test that uses the database, one with real worker processes, one with a live gunicorn.
SAMPLE = [
    "tests/integration/test_testing_helpers.py",
    "tests/acceptance/test_worker_cli.py",
    "tests/api/test_idempotency.py::test_concurrent_identical_submissions_to_a_live_server_make_one_job",
]


def processes_marked_with(text: str) -> list[str]:
    """Command lines of live processes whose environment holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if text.encode() in (entry / "environ").read_bytes():
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.slow
def test_a_test_run_that_starts_the_embedded_postgresql_stops_it_and_everything_else():
    # Beside the project's own (a pytest tmp_path is closed to the server's unprivileged user).
    data_dir = ROOT / ".pgdata" / f"cleanup-{uuid.uuid4().hex[:8]}"
    marker = f"TESTPROJECT_PGDATA={data_dir}"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "RELIABLEQ_TEST_DB")}
    env["TESTPROJECT_PGDATA"] = str(data_dir)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SAMPLE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (data_dir / "PG_VERSION").exists(), "the run did start a server of its own"

    try:
        assert not (data_dir / "postmaster.pid").exists(), "the embedded PostgreSQL is still running"
        assert processes_marked_with(marker) == [], "processes of the run are still alive"
    finally:
        from testproject import embedded

        embedded.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
