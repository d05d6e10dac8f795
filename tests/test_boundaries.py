"""reliableq stands alone: a project without the charges app migrates, checks, serves its schema,
readiness and admin, and never imports charges; the wheel ships the two apps and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from testproject import dburl, processes

pytestmark = pytest.mark.heavy  # not Django-version dependent: the Django 6.1 pass skips it

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.django_db
def test_reliableq_works_whole_without_the_charges_app():
    name = f"rq_alone_{uuid.uuid4().hex[:8]}"
    admin_url = dburl.build(connection.settings_dict, name="postgres")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        probe = subprocess.run(
            [sys.executable, "-m", "tests.boundary_probe"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            env=processes.child_env(
                DJANGO_SETTINGS_MODULE="testproject.settings_without_charges",
                DATABASE_URL=dburl.build(connection.settings_dict, name=name),
            ),
        )
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["answers"] == {
        "schema": 200,
        "ready": 200,
        "job list": 200,
        "job page": 200,
        "dashboard": 200,
        "api job": 200,
        "charges route": 404,
    }, seen
    assert not seen["schema_mentions_charges"], "the schema documents routes this project does not have"
    assert not seen["charge_kind_registered"]
    assert seen["charges_imported"] == [], seen


@pytest.mark.slow
def test_the_wheel_ships_reliableq_and_charges_only(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("django_reliableq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert packages == {"reliableq", "charges"}, sorted(packages)
    for needed in (
        "reliableq/py.typed",
        "charges/py.typed",
        "reliableq/migrations/0001_jobs_and_attempts.py",
        "reliableq/templates/admin/reliableq/job/change_form.html",
        "reliableq/templates/admin/reliableq/queuedashboard/dashboard.html",
        "charges/migrations/0001_charges_and_requests.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    print("\n".join(sorted(names)))
