"""bench.proccpu counts the CPU of a process tree, its children included, and apart from the
database's processes: a child that burns CPU shows up under its root, an idle one does not."""

from __future__ import annotations

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
