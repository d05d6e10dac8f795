"""Where `reliableq.enqueue` spends its time, beside its ceilings and its peers, in one run.

    python -m bench.enqueuecost [--reps 5] [--seconds 2] [--only rates,statements,profile,instructions]

On DATABASE_URL (bench.settings: the peers too, when installed), four measurements:

- rates: committed jobs per second of each path, one after another in each repetition (the order
  rotating), so that every path sees the same machine: ReliableQ's enqueue, procrastinate's
  defer, django-tasks-db's enqueue, and the ceilings (bench.enqueue_ceilings: the same row by bare
  psycopg and by Django's `create`), one job per transaction, one per `transaction.atomic()`, and
  bulk (1,000 per transaction); and ReliableQ's keyed calls: a `unique_key` that finds its job, a
  `debounce` that moves it, and each with a new key per call. Every repetition is printed.
- statements: statements per call, counted by connection.execute_wrapper (BEGIN and COMMIT of an
  atomic block go through the driver, not the wrapper: add 2 for them).
- profile: cProfile of --calls enqueue calls in atomic blocks; the top entries by own time.
- instructions: instructions per call, counted by valgrind's callgrind (as bench.httpcost does):
  a cost the machine's other guests cannot move.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

KIND = "bench.noop"
BULK = 1000
KEYED = ("unique found", "debounce found", "unique new", "debounce new")


def _setup(*, migrate: bool) -> None:
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def _systems() -> list[Any]:
    from .enqueue_ceilings import ceilings
    from .systems import Procrastinate, ReliableQ, TasksDB

    peers = [s for s in (Procrastinate(), TasksDB()) if s.available]
    return [ReliableQ(), *peers, *ceilings()]


def _keyed_call(path: str, n: int) -> None:
    import reliableq

    key = f"k{n}" if path.endswith("new") else "k"
    if path.startswith("debounce"):
        reliableq.enqueue(KIND, {"n": n}, unique_key=key, debounce=60)
    else:
        reliableq.enqueue(KIND, {"n": n}, unique_key=key)


def _run(system: Any, mode: str, seconds: float) -> float:
    """Calls for `seconds`; the stored rows checked against the calls; committed jobs per second."""
    system.reset()
    n = 0
    began = time.monotonic()
    stop_at = began + seconds
    while time.monotonic() < stop_at:
        if mode == "bulk":
            system.enqueue_bulk(BULK)
            n += BULK
        elif mode in KEYED:
            _keyed_call(mode, n)
            n += 1
        else:
            system.enqueue("noop", atomic=mode == "atomic")
            n += 1
    wall = time.monotonic() - began
    stored = system.outcome().total
    expected = 1 if mode.endswith("found") else n
    if stored != expected:
        raise SystemExit(f"{system.name} {mode}: {stored} rows for {expected} expected")
    return n / wall


def rates(reps: int, seconds: float, *, keyed: bool = True) -> dict[tuple[str, str], list[float]]:
    systems = _systems()
    points = [(s, m) for m in ("one", "atomic", "bulk") for s in systems if m != "bulk" or s.has_bulk]
    points += [(systems[0], m) for m in KEYED if keyed]
    got: dict[tuple[str, str], list[float]] = {(s.name, m): [] for s, m in points}
    for rep in range(reps):
        shift = rep % len(points)  # rotate, so that no path always runs first or last
        for system, mode in points[shift:] + points[:shift]:
            got[(system.name, mode)].append(_run(system, mode, seconds))
        print(f"  rep {rep + 1}/{reps} done", file=sys.stderr)
    for system in systems:
        system.reset()
        if hasattr(system, "close"):
            system.close()
    return got


_ID = uuid.UUID(int=1)


def _receiver(**fields: object) -> None:
    """A job_enqueued receiver that does nothing: what a receiver costs beyond its own work."""


def _calls(path: str) -> Callable[[int], object]:
    """One call of a path, given its number (new keys need one)."""
    from django.db import transaction

    import reliableq

    from .enqueue_ceilings import BarePsycopg, DjangoCreate

    bare, create = BarePsycopg(), DjangoCreate()

    def atomic(n: int) -> None:
        with transaction.atomic():
            reliableq.enqueue(KIND, {})

    if path in ("enqueue with a receiver", "a receiver alone"):
        from reliableq import signals

        signals.job_enqueued.connect(_receiver, weak=False, dispatch_uid="bench.enqueuecost")
    if path in ("enqueue traced", "a span alone"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        trace.set_tracer_provider(TracerProvider())  # an SDK that records spans and exports none

    def announce(n: int) -> None:  # what enqueue adds for a receiver: its check, on_commit, the send
        from reliableq.services import enqueueing

        enqueueing._announce([(_ID, KIND, "default")])

    def span(n: int) -> None:  # what enqueue adds for tracing: its PRODUCER span and the context
        from reliableq import tracing

        with tracing.publishing(KIND, "default"):
            pass

    calls: dict[str, Callable[[int], object]] = {
        "enqueue": lambda n: reliableq.enqueue(KIND, {}),
        "enqueue with a receiver": lambda n: reliableq.enqueue(KIND, {}),
        "a receiver alone": announce,
        "enqueue traced": lambda n: reliableq.enqueue(KIND, {}),
        "a span alone": span,
        "enqueue atomic": atomic,
        "enqueue_many 1000": lambda n: reliableq.enqueue_many(KIND, [{}] * BULK),
        "create": lambda n: create.enqueue("noop"),
        "psycopg": lambda n: bare.enqueue("noop"),
    }
    for keyed in KEYED:
        calls[keyed] = functools.partial(_keyed_call, keyed)
    return calls[path]


STATEMENT_PATHS = ("enqueue", "enqueue atomic", "enqueue_many 1000", "create", *KEYED)


def statements(calls: int, *, keyed: bool = True) -> dict[str, float]:
    from django.db import connection

    from .systems import ReliableQ

    counted: dict[str, float] = {}
    for path in [p for p in STATEMENT_PATHS if keyed or p not in KEYED]:
        ReliableQ().reset()
        call = _calls(path)
        call(-1)  # the key's first job, for the paths that find it
        seen: list[str] = []

        def count(execute: Any, sql: str, params: Any, many: bool, context: Any, seen: list[str] = seen) -> Any:
            seen.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count):
            for n in range(calls):
                call(n)
        counted[path] = len(seen) / calls
    ReliableQ().reset()
    return counted


def profile(calls: int, top: int = 18) -> str:
    from .systems import ReliableQ

    ReliableQ().reset()
    call = _calls("enqueue atomic")
    for n in range(50):  # warm: the statement cache, the first connection
        call(n)
    profiler = cProfile.Profile()
    profiler.enable()
    for n in range(calls):
        call(n)
    profiler.disable()
    ReliableQ().reset()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(r"reliableq|django/db/models/(base|query)", top)
    return out.getvalue()


# With a receiver of job_enqueued or an OpenTelemetry SDK, beside what each adds by itself: what
# enqueue pays for a hook should be the hook's own work and nothing more (and nothing without one).
HOOK_PATHS = ("enqueue with a receiver", "a receiver alone", "enqueue traced", "a span alone")
INSTRUCTION_PATHS = ("enqueue", "enqueue atomic", "create", "psycopg", "debounce found", *HOOK_PATHS)
WARM = 50


def _inner(path: str, count: int) -> None:
    _setup(migrate=False)
    call = _calls(path)
    call(-1)
    for n in range(count):
        call(n)


def _instructions(path: str, count: int) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")}
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "bench.enqueuecost", "--inner", path, str(count)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        raise SystemExit(f"callgrind run of {path} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return int(found.group(1))


def instructions(calls: int, paths: tuple[str, ...] = INSTRUCTION_PATHS) -> dict[str, float]:
    from .systems import ReliableQ

    runs = [(path, count) for path in paths for count in (WARM, WARM + calls)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counted = dict(zip(runs, pool.map(lambda run: _instructions(*run), runs), strict=True))
    ReliableQ().reset()
    return {path: (counted[(path, WARM + calls)] - counted[(path, WARM)]) / calls for path in paths}


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.enqueuecost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--calls", type=int, default=2000, help="calls per statements / profile run")
    parser.add_argument("--instruction-calls", type=int, default=200)
    parser.add_argument("--only", default="rates,statements,profile,instructions")
    parser.add_argument(
        "--plain", action="store_true", help="leave out the keyed paths (unique_key, debounce): a tree without debounce"
    )
    parser.add_argument("--instruction-paths", default=",".join(INSTRUCTION_PATHS))
    parser.add_argument("--inner", nargs=2, metavar=("PATH", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        _inner(args.inner[0], int(args.inner[1]))
        return 0
    only = {word.strip() for word in args.only.split(",") if word.strip()}
    _setup(migrate=True)
    if "rates" in only:
        got = rates(args.reps, args.seconds, keyed=not args.plain)
        print(f"\nCommitted jobs/s, median (min-max) of {args.reps} repetitions of {args.seconds:g} s\n")
        print("| system | path | jobs/s | every repetition |")
        print("| --- | --- | ---: | --- |")
        for (name, mode), values in got.items():
            print(f"| {name} | {mode} | {_span(values)} | {', '.join(f'{v:,.0f}' for v in values)} |")
    if "statements" in only:
        print(f"\nStatements per call (execute_wrapper, {args.calls} calls)\n")
        print("| path | statements per call |")
        print("| --- | ---: |")
        for path, per in statements(args.calls, keyed=not args.plain).items():
            print(f"| {path} | {per:.2f} |")
    if "profile" in only:
        print(f"\ncProfile, {args.calls} enqueue calls, one per transaction.atomic() block\n")
        print(profile(args.calls))
    if "instructions" in only:
        if not shutil.which("valgrind"):
            print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
            return 2
        chosen = [p.strip() for p in args.instruction_paths.split(",") if p.strip()]
        paths = tuple(p for p in chosen if not (args.plain and p in KEYED))
        counts = instructions(args.instruction_calls, paths)
        print(f"\nInstructions per call (callgrind, {args.instruction_calls} calls after {WARM}; Python's side only)\n")
        print("| path | instructions per call |")
        print("| --- | ---: |")
        for path, value in counts.items():
            print(f"| {path} | {value / 1e3:,.0f} k |")
        hooks = [("a job_enqueued receiver", "enqueue with a receiver", "a receiver alone"),
                 ("an OpenTelemetry SDK", "enqueue traced", "a span alone")]  # fmt: skip
        rows = [(name, counts[with_] - counts["enqueue"], counts[alone])
                for name, with_, alone in hooks if {"enqueue", with_, alone} <= counts.keys()]  # fmt: skip
        if rows:
            print("\n| installed | what it adds to enqueue | its own work, alone |")
            print("| --- | ---: | ---: |")
            for name, added, alone_count in rows:
                print(f"| {name} | {added / 1e3:,.1f} k | {alone_count / 1e3:,.1f} k |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
