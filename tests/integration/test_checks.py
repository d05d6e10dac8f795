"""The system check: ReliableQ refuses any default database but PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, connections

from reliableq import checks
from testproject import dburl

ROOT = Path(__file__).resolve().parents[2]


def run_check(database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELIABLEQ_")}
    env.update(DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="testproject.settings")
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_refuses_sqlite_because_skip_locked_needs_postgresql(tmp_path: Path) -> None:
    result = run_check(f"sqlite:///{tmp_path}/x.sqlite3")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "reliableq.E001" in output
    assert "ReliableQ needs PostgreSQL, but the default database is sqlite" in output
    assert "SKIP LOCKED" in output
    assert "PostgreSQL" in output


def test_check_passes_on_postgresql_in_process() -> None:
    assert connection.vendor == "postgresql"
    assert checks.postgresql_errors(connections) == []
    assert checks.check_default_database() == []
    call_command("check", verbosity=0)  # raises SystemCheckError on any error


@pytest.mark.django_db
def test_check_passes_on_postgresql_in_a_subprocess() -> None:
    result = run_check(dburl.build(connection.settings_dict))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "E001" not in result.stdout + result.stderr
