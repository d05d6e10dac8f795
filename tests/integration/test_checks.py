"""The system check: ReliableQ refuses a queue database that is not PostgreSQL, or not in DATABASES."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings

from reliableq import checks
from reliableq.queue import db
from testproject import dburl

ROOT = Path(__file__).resolve().parents[2]


def run_check(database_url: str, queue_database_url: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELIABLEQ_") and k != "QUEUE_DATABASE_URL"}
    env.update(DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="testproject.settings")
    if queue_database_url:
        env.update(QUEUE_DATABASE_URL=queue_database_url)
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


def test_the_check_asks_postgresql_of_the_queues_database_only(tmp_path: Path) -> None:
    queue_url = dburl.build(db.connection().settings_dict)
    result = run_check(f"sqlite:///{tmp_path}/app.sqlite3", queue_database_url=queue_url)
    assert result.returncode == 0, result.stdout + result.stderr  # the project's own data may live anywhere
    result = run_check(queue_url, queue_database_url=f"sqlite:///{tmp_path}/queue.sqlite3")
    assert result.returncode != 0
    assert "ReliableQ needs PostgreSQL, but the queue database is sqlite" in result.stdout + result.stderr


def test_check_passes_on_postgresql_in_process() -> None:
    assert db.connection().vendor == "postgresql"
    assert checks.postgresql_errors(connections, db.alias()) == []
    assert checks.check_queue_database() == []
    call_command("check", verbosity=0)  # raises SystemCheckError on any error


@pytest.mark.django_db
def test_check_passes_on_postgresql_in_a_subprocess() -> None:
    result = run_check(dburl.build(connection.settings_dict))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "E001" not in result.stdout + result.stderr


def test_a_queue_database_or_listen_alias_missing_from_databases_is_an_error_naming_it() -> None:
    with override_settings(RELIABLEQ={"DATABASE": "jobs"}):
        [error] = checks.check_queue_database()
    assert (error.id, error.msg) == (
        "reliableq.E003",
        "RELIABLEQ['DATABASE'] is 'jobs', which is not an alias in DATABASES.",
    )
    with override_settings(RELIABLEQ={"LISTEN_DATABASE": "direct-typo"}):
        [error] = checks.check_queue_database()
    assert error.id == "reliableq.E003" and "RELIABLEQ['LISTEN_DATABASE'] is 'direct-typo'" in error.msg
