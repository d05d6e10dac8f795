"""The worker's parts while the database is away (reliableq/worker/reconnect.py): one line in the log
when an outage begins and one when every part is back, capped and jittered pauses, the health file
marked meanwhile. The errors are the ones Django raises when the server is gone; the real ones, made
by a real PostgreSQL, are in tests/integration/test_outage.py and tests/failover."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from django.db import OperationalError, ProgrammingError

from reliableq.worker.alive import AliveFile
from reliableq.worker.reconnect import ERROR_MAX_SECONDS, RECONNECT_MAX_SECONDS, Outage, Retry

GONE = OperationalError("consuming input failed: server closed the connection unexpectedly")
BUG = ProgrammingError('relation "reliableq_jobz" does not exist')


def test_an_outage_is_logged_once_when_it_begins_and_once_when_every_part_is_back(caplog):
    outage = Outage("w1")
    parts = [Retry(part, outage, base=0.1) for part in ("loop", "heartbeat", "listener")]
    with caplog.at_level(logging.INFO, logger="reliableq.worker"):
        for _ in range(50):  # many attempts of each part while the database is away
            for retry in parts:
                retry.failed(GONE)
        state = outage.state()
        for retry in parts[:2]:
            retry.succeeded()
        assert outage.down, "the listener is still reconnecting"
        parts[2].succeeded()
        for retry in parts:
            retry.succeeded()  # every later success: nothing more to say
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, _ in said] == ["WARNING", "INFO"], said
    assert "the database is unavailable (loop: consuming input failed" in said[0][1]
    assert "the database is back after" in said[1][1]
    assert state is not None and state.startswith("reconnecting since ")
    assert state.endswith(
        "(heartbeat, listener, loop): consuming input failed: server closed the connection unexpectedly"
    )
    assert outage.state() is None and not outage.down


def test_a_second_outage_is_logged_again(caplog):
    outage = Outage("w1")
    retry = Retry("loop", outage, base=0.1)
    with caplog.at_level(logging.WARNING, logger="reliableq.worker"):
        for _ in range(2):
            retry.failed(GONE)
            retry.failed(GONE)
            retry.succeeded()
    assert len(caplog.records) == 2 and outage.outages == 2


def test_pauses_are_jittered_and_capped_while_the_database_is_away():
    retry = Retry("loop", Outage("w1"), base=1.0)
    pauses = [retry.failed(GONE) for _ in range(200)]
    assert max(pauses) <= RECONNECT_MAX_SECONDS
    assert len(set(pauses)) > 150, "full jitter: a fleet does not reconnect in step"
    assert max(pauses[20:]) > RECONNECT_MAX_SECONDS / 2, "the cap is reached"


def test_another_database_error_is_no_outage_and_waits_longer_between_attempts():
    outage = Outage("w1")
    retry = Retry("loop", outage, base=1.0)
    pauses = [retry.failed(BUG) for _ in range(200)]
    assert not outage.down and outage.state() is None and outage.outages == 0
    assert RECONNECT_MAX_SECONDS < max(pauses) <= ERROR_MAX_SECONDS


def test_each_thread_learns_once_that_an_outage_began():
    outage = Outage("w1")
    writer, heartbeat = outage.watch(), outage.watch()
    assert not writer() and not heartbeat()
    Retry("loop", outage, base=0.1).failed(GONE)
    assert writer() and not writer(), "once per outage"
    assert heartbeat(), "every thread, each on its own"


@pytest.mark.parametrize("missing_dir", [False, True])
def test_the_health_file_says_reconnecting_while_the_database_is_away(tmp_path: Path, missing_dir: bool):
    path = tmp_path / ("gone/worker.alive" if missing_dir else "worker.alive")
    alive = AliveFile(path)
    alive.touch(1.0)
    alive.touch(2.5, "reconnecting since 2026-01-01T00:00:00+00:00 (loop): refused")
    alive.touch(2.6, "reconnecting since 2026-01-01T00:00:00+00:00 (loop): refused")  # within a second: nothing
    if missing_dir:  # nothing to write in: the loop goes on regardless
        assert not path.exists()
        return
    assert path.read_text() == "reconnecting since 2026-01-01T00:00:00+00:00 (loop): refused\n"
    before = path.stat().st_mtime_ns
    alive.touch(2.7)  # back: said at once, not a second later
    assert path.read_text() == "" and path.stat().st_mtime_ns >= before
