"""bench.proccpu counts the CPU of a process tree, its children included, and apart from the
database's processes: a child that burns CPU shows up under its root, an idle one does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench import proccpu

pytestmark = pytest.mark.skipif(not proccpu.available(), reason="needs /proc")

BURN = "import time\nend = time.process_time() + 2.0\nwhile time.process_time() < end: pass\n"


def test_a_busy_child_is_counted_under_its_root_and_an_idle_one_is_not():
    parent = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN!r}])"
    busy = subprocess.Popen([sys.executable, "-c", parent])
    # The idle child says when it has started: its start-up (imports, a coverage tracer under CI)
    # costs CPU, and the window below must hold only its sleep.
    idle = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE
    )
    try:
        assert idle.stdout is not None and idle.stdout.readline() == b"ready\n"
        busy_meter, idle_meter = proccpu.Meter([busy.pid]), proccpu.Meter([idle.pid])
        (busy_before, _), (idle_before, _) = busy_meter.read(), idle_meter.read()
        deadline = time.monotonic() + 20
        while busy_meter.read()[0] - busy_before < 0.3:  # the grandchild's burn, read while it lives
            assert busy.poll() is None and time.monotonic() < deadline, "the burn ended before it was seen"
            time.sleep(0.05)
        assert idle_meter.read()[0] - idle_before < 0.1
    finally:
        busy.wait(timeout=20)
        idle.kill()
        idle.communicate()


def test_a_child_that_exits_inside_the_window_keeps_its_cpu():
    """A process that ends between two readings is gone from /proc; its CPU is then counted in its
    parent's reaped-children time (a gunicorn worker's under the master, a PostgreSQL backend's
    under the postmaster), so a reading never drops. (Seen first as negative CPU per request in
    bench.http, when autovacuum workers ended inside a run.)"""
    script = (
        "import subprocess, sys, time\n"
        "sys.stdin.readline()\n"
        f"subprocess.run([sys.executable, '-c', {BURN!r}])\n"
        "print('reaped', flush=True)\n"
        "time.sleep(60)\n"
    )
    root = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        meter = proccpu.Meter([root.pid])
        before, _ = meter.read()
        assert root.stdin is not None and root.stdout is not None
        root.stdin.write(b"go\n")
        root.stdin.flush()
        assert root.stdout.readline() == b"reaped\n"
        after, _ = meter.read()
        assert after - before > 1.5  # the child's 2 s burn, read after the child is gone
    finally:
        root.kill()
        root.communicate()


def test_a_database_session_that_ends_inside_the_window_keeps_its_cpu():
    import psycopg
    from django.db import connection

    from testproject import dburl

    meter = proccpu.Meter([])
    _, before = meter.read()
    with psycopg.connect(dburl.build(connection.settings_dict), autocommit=True) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        start = proccpu.cpu_seconds(backend)
        # Burn until the backend has used a measurable half second, however fast the machine.
        while (burnt := proccpu.cpu_seconds(backend) - start) < 0.5:
            conn.execute("SELECT count(*) FROM generate_series(1, 1000000)").fetchone()
    deadline = time.monotonic() + 10
    # The backend exits after the client closes and the postmaster reaps it: then it is gone from /proc.
    while os.path.exists(f"/proc/{backend}"):
        assert time.monotonic() < deadline, "the backend did not end"
        time.sleep(0.02)
    assert meter.read()[1] - before >= burnt - 0.05  # its CPU, kept by the postmaster after it ended
