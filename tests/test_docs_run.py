"""The README's five minutes, the tutorial and the how-tos run as written, in a fresh project.

A reader's directory (tests/docrun.py says what runs) gets the virtual environment this suite
runs in (as `.venv`, where the tutorial made it), a database of its own on the test server, reached through libpq's PG*
variables as the tutorial's settings say, and nothing of testproject. Then every marked block of
the tutorial, then of the how-tos that continue its project, runs in order. A block that fails,
or a session whose output differs from the page, fails the test with the transcript. The
README's own five minutes run the same way, in a project of their own.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from testproject import dburl
from tests.docrun import Reader, blocks
from tests.support import ROOT

pytestmark = pytest.mark.slow

# In the order a reader takes them: the how-tos continue the tutorial's project.
DOCS = [
    "docs/tutorial.md",
    "docs/how-to/test-handlers.md",
    "docs/how-to/http-submission.md",
    "docs/how-to/workflows.md",
]


@pytest.fixture
def database() -> Iterator[tuple[dict[str, str], str]]:
    """A database of the reader's own on the test server, and the PG* variables that reach it."""
    settings = connection.settings_dict
    name = f"docrun_{uuid.uuid4().hex[:10]}"
    admin = dburl.build({**settings, "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    pg = {"PGDATABASE": name, "PGUSER": settings.get("USER") or "postgres"}
    if settings.get("HOST"):
        pg["PGHOST"] = settings["HOST"]
    if settings.get("PORT"):
        pg["PGPORT"] = str(settings["PORT"])
    if settings.get("PASSWORD"):
        pg["PGPASSWORD"] = settings["PASSWORD"]
    try:
        yield pg, admin
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            for db in (name, f"test_{name}"):
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def reader_env(pg: dict[str, str]) -> dict[str, str]:
    """A terminal's environment: no DATABASE_URL, no settings module, nothing of this repository's."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")}
    keep.update({k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")})
    return {**keep, **pg}


def follow(docs: list[str], tmp_path: Path, pg: dict[str, str]) -> tuple[Reader, dict[str, int]]:
    """A reader with the suite's environment as `.venv` types every marked block of `docs`, in order."""
    home = tmp_path / "reader"
    home.mkdir()
    (home / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    from testproject import processes

    env = reader_env(pg)
    env["DOCRUN_PYTHON"] = str(home / ".venv" / "bin" / "python")
    reader = Reader(cwd=home, env=env, port=processes.free_port())
    ran: dict[str, int] = {}
    try:
        for doc in docs:
            marked = blocks(ROOT / doc, ROOT)
            ran[doc] = len(marked)
            for block in marked:
                reader.follow(block)
            reader.finish()
    finally:
        reader.close()
        (tmp_path / "transcript.txt").write_text(reader.transcript_all(), encoding="utf-8")  # to read after a run
    return reader, ran


def test_the_readme_five_minutes_run_as_written_in_a_fresh_project(
    tmp_path: Path, database: tuple[dict[str, str], str]
) -> None:
    pg, _ = database
    reader, ran = follow(["README.md"], tmp_path, pg)

    # startproject, settings, urls, jobs.py, migrate and a worker, the admin user, the server, the curl.
    assert ran["README.md"] >= 7, f"the README lost marked blocks: {ran}"
    with psycopg.connect(dburl.build({**connection.settings_dict, "NAME": pg["PGDATABASE"]})) as conn:
        jobs = conn.execute(
            "SELECT status, payload->>'order_id', dedupe_key FROM reliableq_job"
            " WHERE kind = 'shop.send_receipt' ORDER BY created_at"
        ).fetchall()
        admins = conn.execute("SELECT username FROM auth_user WHERE is_superuser").fetchall()
    # The enqueued job and the curl's both ran; the curl's carries its Idempotency-Key.
    assert jobs == [("SUCCEEDED", "42", None), ("SUCCEEDED", "43", "order-43-receipt")], reader.transcript()
    assert admins == [("admin",)], reader.transcript()
    assert "HTTP/1.1 202 Accepted" in reader.transcript_all(), reader.transcript()
    assert reader.transcript_all().count("Subject: Receipt for order") == 2, reader.transcript()


def test_every_marked_block_of_the_tutorial_and_the_how_tos_runs_as_written(
    tmp_path: Path, database: tuple[dict[str, str], str]
) -> None:
    pg, _ = database
    reader, ran = follow(DOCS, tmp_path, pg)

    assert all(ran.values()), f"a page lost its marked blocks: {ran}"
    # What the pages say happened, read from the reader's own database.
    with psycopg.connect(dburl.build({**connection.settings_dict, "NAME": pg["PGDATABASE"]})) as conn:
        rows = conn.execute(
            "SELECT status, payload FROM reliableq_job WHERE kind = 'shop.send_receipt' ORDER BY created_at"
        ).fetchall()
    statuses = [(status, json.dumps(payload, sort_keys=True)) for status, payload in rows]
    assert statuses[:2] == [("SUCCEEDED", '{"order_id": 42}'), ("DEAD", "{}")], reader.transcript()
    # The HTTP how-to's curl made it; the workflows how-to's worker has run it since.
    assert ("SUCCEEDED", '{"order_id": 43}') in statuses, reader.transcript()
    with psycopg.connect(dburl.build({**connection.settings_dict, "NAME": pg["PGDATABASE"]})) as conn:
        workflows = dict(conn.execute("SELECT name, status || ' ' || run FROM reliableq_workflow").fetchall())
    assert workflows == {
        "orders 2026-11-30": "SUCCEEDED 1",
        "orders 2026-12-01": "FAILED 2",
        "orders 2026-12-02": "CANCELLED 1",
    }, reader.transcript()
