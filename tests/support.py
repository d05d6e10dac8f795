"""Helpers shared by the tests: polling with a deadline and real worker subprocesses."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Poll `predicate` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def late_by(order: list[Any], rounds: int) -> int:
    """The most rounds a key's start came after a start of a later round, over each key's first `rounds` starts.

    `order` is the fair_key of each start, in start order. A key's n-th start is in round n; in a
    perfect rotation no start of round n+1 comes before the last start of round n, so the answer
    is 0; "no key waits more than one round of the other keys" is 1. FIFO over a flood: hundreds.
    """
    seen: dict[Any, int] = {}
    highest = worst = 0
    for key in order:
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= rounds:
            worst = max(worst, highest - seen[key])
        highest = max(highest, seen[key])
    return worst


def claims_of_workers(rows: Iterable[tuple[str, Any, int]]) -> list[tuple[Any, Any, list[int]]]:
    """Claims for turns_left_behind from first attempts' (worker_id, started_at, the job's turn rank).

    A worker's attempts that start together came from one claim (the claim statement's time). A
    worker claims one claim after another, so its next claim began after this one had committed:
    a bound on its return that no load can move (its last claim: none).
    """
    taken: dict[tuple[str, Any], list[int]] = {}
    for worker, started, rank in rows:
        taken.setdefault((worker, started), []).append(rank)
    never = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return [
        (started, min((s for w, s in taken if w == worker and s > started), default=never), ranks)
        for (worker, started), ranks in taken.items()
    ]


def turns_left_behind(claims: list[tuple[Any, Any, list[int]]], *, tokens: int) -> list[str]:
    """The claims that passed over more turns than the claims overlapping them could hold.

    Each claim is (called, returned, ranks): when it began and when it had committed, on one causal
    clock (a counter, or the start of the same claimer's next claim), and each job's place in turn
    order. A claim takes the next turns nobody holds; a turn it passed over was held by a claim
    that overlapped it: taken there, or held as one of its `tokens` and let go. So the turns before
    a claim's last that went to claims begun after it returned number at most `tokens` per
    overlapping claim. Load only makes more claims overlap: it loosens the bound, never breaks it.
    FIFO over a flood leaves dozens of turns behind each early claim.
    """
    bad = []
    for called, returned, ranks in claims:
        if not ranks:
            continue
        last = max(ranks)
        overlapping = sum(1 for c, r, _ in claims if c < returned and r > called) - 1
        left = sorted(n for c, _, later in claims if c > returned for n in later if n < last)
        if len(left) > tokens * overlapping:
            bad.append(f"claim of turns {sorted(ranks)} left {left} behind, {overlapping} claims overlapping it")
    return bad


class WorkerProcess:
    """A real `manage.py runworker` subprocess with its log in a file."""

    def __init__(self, args: list[str], *, env: dict[str, str], log: Path) -> None:
        self.args = args
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworker", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, text: str, *, timeout: float = 30.0) -> None:
        wait_until(
            lambda: text in self.output() or (self.proc.poll() is not None and text in self.output()),
            timeout=timeout,
            what=f"{text!r} in the log of worker {self.pid}:\n{self.output()[-3000:]}",
        )

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.pid} still running after {timeout}s:\n{self.output()[-3000:]}"
            ) from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process cannot die until resumed
                self.proc.kill()
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self._log_file.close()


def worker_env(db_url: str, **overrides: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELIABLEQ_", "CHARGES_"))}
    env.update(
        DATABASE_URL=db_url,
        PYTHONUNBUFFERED="1",
        RELIABLEQ_LEASE_SECONDS="2",
        RELIABLEQ_BACKOFF_BASE_SECONDS="0.05",
        RELIABLEQ_BACKOFF_MAX_SECONDS="0.2",
        RELIABLEQ_POLL_SECONDS="0.1",
    )
    env.update(queue_database_env())
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def queue_database_env() -> dict[str, str]:
    """QUEUE_DATABASE_URL for a subprocess: the queue's test database, when the queue has one of its own."""
    from django.db import connections

    from reliableq.queue import db
    from testproject import dburl

    if db.alias() == "default":
        return {}
    return {"QUEUE_DATABASE_URL": dburl.build(connections[db.alias()].settings_dict)}
