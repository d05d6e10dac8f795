"""runworker --health-file: the file stays fresh while the loop turns, goes stale while it is stuck."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def age(path: Path) -> float:
    return time.time() - path.stat().st_mtime


def test_the_health_file_is_fresh_while_the_loop_turns_and_stale_while_it_is_stopped(spawn_worker, tmp_path):
    alive = tmp_path / "worker.alive"
    worker = spawn_worker("--health-file", str(alive), env={"RELIABLEQ_POLL_SECONDS": "0.5"})
    wait_until(alive.exists, timeout=30, what="the health file")
    first = alive.stat().st_mtime
    wait_until(lambda: alive.stat().st_mtime > first, timeout=10, what="the idle loop to touch it again")

    worker.signal(signal.SIGSTOP)  # a stuck loop, as a probe sees it
    try:
        stopped = alive.stat().st_mtime
        wait_until(lambda: age(alive) > 3.0, timeout=10, what="three seconds without a pass")
        assert alive.stat().st_mtime == stopped
    finally:
        worker.signal(signal.SIGCONT)
    wait_until(lambda: age(alive) < 2.0, timeout=10, what="the resumed loop to touch it")
