"""What every scenario shares: the harness's own PostgreSQL, processes, progress, statistics, the gate.

Nothing here imports Django at module level: `prepare_environment` must run first, so that
every process of the run (this one, gunicorn, the workers, the peers) uses bench.settings
and the harness's own server in .pgdata/bench.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / ".pgdata" / "bench"
RESULTS = ROOT / "bench" / "results"
DB_NAME = "bench"
MAX_CONNECTIONS = 400
# A latency or a DB-timed window may exceed the monotonic window it lies in by clock skew only.
SKEW_SECONDS = 0.02

T = TypeVar("T")


# -- the server --------------------------------------------------------------------------


def start_server(data_dir: Path = DATA_DIR) -> str:
    """Start (or find) the harness's own embedded PostgreSQL; return the DATABASE_URL of its bench database.

    Configured once: max_connections for a fleet of workers plus the peers, pg_stat_statements loaded
    (tracking off but in the fleet scenario's windows: bench.statements). synchronous_commit
    and fsync stay at their defaults (on): every committed job is durable, as in production.
    """
    import psycopg

    from testproject import dburl, embedded

    from . import statements

    socket_dir = embedded.ensure_running(data_dir)
    admin = dburl.build({"USER": "postgres", "HOST": socket_dir, "PORT": "", "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        (current,) = conn.execute("SHOW max_connections").fetchone()  # type: ignore[misc]
        restart = int(current) < MAX_CONNECTIONS
        if restart:
            conn.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
        restart = statements.enable(conn) or restart  # the fleet scenario counts statements by duty
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone():
            conn.execute(f"CREATE DATABASE {DB_NAME}")
    if restart:
        embedded.restart(data_dir)
        socket_dir = embedded.ensure_running(data_dir)
    url = dburl.build({"USER": "postgres", "HOST": socket_dir, "PORT": "", "NAME": DB_NAME})
    with psycopg.connect(url, autocommit=True) as conn:
        statements.install(conn)
    return url


def prepare_environment(database_url: str) -> None:
    """Point this process and every child at bench.settings and the harness's server."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ.pop("RELIABLEQ_TEST_DB", None)


def child_env(**overrides: Any) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    for key in [k for k in env if k.startswith(("RELIABLEQ_", "CHARGES_")) and k != "RELIABLEQ_LOG_LEVEL"]:
        del env[key]  # the caller's knobs (crash points, test kinds) never leak into a measurement
    env.update({k: str(v) for k, v in overrides.items()})
    return env


# -- processes ---------------------------------------------------------------------------


class Procs:
    """Child processes of one measurement, each with its log; stopped together."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.started: list[subprocess.Popen[bytes]] = []
        self._files: list[Any] = []

    def spawn(self, name: str, argv: Sequence[str], *, env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("ab")
        self._files.append(log)
        proc = subprocess.Popen(list(argv), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.started.append(proc)
        return proc

    def manage(self, name: str, args: Sequence[str], *, env: dict[str, str]) -> subprocess.Popen[bytes]:
        return self.spawn(name, [sys.executable, str(ROOT / "manage.py"), *args], env=env)

    def check_alive(self) -> None:
        dead = [p for p in self.started if p.poll() is not None]
        if dead:
            raise RuntimeError(f"process {dead[0].args!r} exited with {dead[0].returncode}; see {self.logs}")

    def stop(self, timeout: float = 15.0) -> None:
        from testproject import processes

        for proc in self.started:
            if proc.poll() is None:
                try:
                    proc.terminate()
                except ProcessLookupError:
                    pass
        for proc in self.started:
            processes.stop(proc, timeout=timeout)
        for f in self._files:
            f.close()
        self.started.clear()
        self._files.clear()

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(
    predicate: Callable[[], T], *, timeout: float, interval: float = 0.05, what: str, procs: Procs | None = None
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if procs is not None:
            procs.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# -- progress ----------------------------------------------------------------------------


class Progress:
    def __init__(self, stream: Any = None) -> None:
        self.began = time.monotonic()
        self.stream = stream or sys.stderr

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def say(self, message: str) -> None:
        minutes, seconds = divmod(int(self.elapsed()), 60)
        print(f"[{minutes:02d}:{seconds:02d}] {message}", file=self.stream, flush=True)


# -- statistics --------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Summary:
    """Repetitions of one figure: the median is what the report quotes, with the range beside it."""

    values: list[float]
    # What was measured (system, configuration, unit): the report names it when a repetition is an outlier.
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    @property
    def low(self) -> float:
        return min(self.values) if self.values else math.nan

    @property
    def high(self) -> float:
        return max(self.values) if self.values else math.nan

    def text(self, digits: int = 0) -> str:
        if not self.values:
            return "n/a"
        if len(self.values) == 1:
            return f"{self.median:,.{digits}f}"
        return f"{self.median:,.{digits}f} ({self.low:,.{digits}f}–{self.high:,.{digits}f})"

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.low, "max": self.high, "values": self.values}


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def median_interval(values: Sequence[float], *, resamples: int = 2000, level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval of the median of `values` (seeded: the same values give the same
    interval). With a handful of values it is as wide as their range, as it should be."""
    import random

    if len(values) < 2:
        return (values[0], values[0]) if values else (math.nan, math.nan)
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    cut = (1 - level) / 2
    return medians[int(cut * resamples)], medians[min(resamples - 1, int((1 - cut) * resamples))]


# -- the correctness gate ----------------------------------------------------------------


class GateFailure(AssertionError):
    """A run's figures do not count: the queue's state after it is not what it must be."""


@dataclass
class Gate:
    """Every run passes these checks before its figures count (the report lists them all)."""

    checks: list[tuple[str, str, bool]] = field(default_factory=list)  # (run, check, passed)

    def check(self, run: str, what: str, passed: bool) -> None:
        self.checks.append((run, what, bool(passed)))
        if not passed:
            raise GateFailure(f"{run}: {what}")

    def window(self, run: str, samples: Iterable[float], wall: float, what: str = "latency") -> None:
        """Every sample (a latency, a DB-timed span) must lie inside the run's monotonic window."""
        samples = list(samples)
        bad = [s for s in samples if not (-SKEW_SECONDS <= s <= wall + SKEW_SECONDS + wall * 0.001)]
        self.check(
            run,
            f"{len(samples)} {what} sample(s) inside the run's {wall:.2f} s monotonic window"
            + (f" ({len(bad)} outside, e.g. {bad[0]:.3f} s)" if bad else ""),
            not bad,
        )

    @property
    def runs(self) -> int:
        return len({run for run, _, _ in self.checks})

    @property
    def passed(self) -> bool:
        return all(ok for _, _, ok in self.checks)


# -- the machine -------------------------------------------------------------------------


def machine(cursor: Any) -> dict[str, str]:
    cursor.execute("SHOW server_version")
    (pg,) = cursor.fetchone()
    settings = {}
    for name in ("synchronous_commit", "fsync", "shared_buffers", "max_connections"):
        cursor.execute(f"SHOW {name}")
        settings[name] = cursor.fetchone()[0]
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        mem_kb = int(next(line for line in meminfo if line.startswith("MemTotal")).split()[1])
        memory = f"{mem_kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "?"
    import django

    return {
        "cores": str(os.cpu_count()),
        "cpu": cpu,
        "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "django": django.get_version(),
        "postgresql": f"{pg} (embedded, own data dir .pgdata/bench, unix socket)",
        **settings,
    }


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())
