"""Latency from enqueue to start and to finish at a steady offered load, each system's own timestamps."""

from __future__ import annotations

import time

from ..core import Procs, percentile, wait_for
from ..systems import System
from .context import Bench
from .helpers import Section, fmt_ms_percentile, table
from .registry import scenario

NAMES = {"reliableq": "ReliableQ", "procrastinate": "procrastinate", "tasksdb": "django-tasks-db"}
QUANTILES = (50, 95, 99)


@scenario(
    "latency",
    title="Latency from enqueue to start and to finish at a steady load",
    knobs=("reps", "latency_rate", "latency_seconds", "fleet", "peers"),
)
def latency(bench: Bench, s: Section) -> None:
    fp, fc = 1, bench.p.fleet[1]
    rate, secs = bench.p.latency_rate, bench.p.latency_seconds
    s.intro = (
        f"{rate:g} no-op jobs/s offered for {secs:g} s, one job per transaction at even intervals, into "
        f"idle workers ({fp} x {fc}). Timestamps are each system's own: ReliableQ's from the database "
        "(created_at, the first attempt's started_at, finished_at), procrastinate's from its events "
        "table (database time), django-tasks-db's from its rows (the worker's clock)."
    )
    results: dict[str, dict[str, list[float]]] = {}
    by_rep: dict[str, list[list[tuple[float, float]]]] = {}  # each repetition's (start, finish) pairs
    for system in [bench.rq, *bench.peers]:
        by_rep[system.key] = []
        achieved = []
        for rep in range(bench.p.reps):
            pairs, offered = _one_rep(bench, system, rep, processes=fp, concurrency=fc)
            by_rep[system.key].append(pairs)
            achieved.append(offered)
        system.reset()
        results[system.key] = {
            "start": [a for pairs in by_rep[system.key] for a, _ in pairs],
            "finish": [b for pairs in by_rep[system.key] for _, b in pairs],
            "offered": achieved,
        }
    header = [
        "system",
        "offered jobs/s",
        "start p50 ms",
        "start p95 ms",
        "start p99 ms",
        "finish p50 ms",
        "finish p95 ms",
        "finish p99 ms",
    ]
    rows = []
    for key, r in results.items():
        reps = {
            "start": [[a for a, _ in pairs] for pairs in by_rep[key]],
            "finish": [[b for _, b in pairs] for pairs in by_rep[key]],
        }
        rows.append(
            [
                NAMES[key],
                f"{sum(r['offered']) / len(r['offered']):.0f}",
                *[fmt_ms_percentile(r[k], reps[k], q) for k in ("start", "finish") for q in QUANTILES],
            ]
        )
    s.tables.append(table(header, rows))
    ranges = " In brackets, the range of each repetition's own percentile." if bench.p.reps > 1 else ""
    s.notes.append(
        "All repetitions pooled." + ranges + " ReliableQ's idle workers wake on LISTEN/NOTIFY; "
        "procrastinate listens too; django-tasks-db polls (every 0.1 s here)."
    )
    s.data = {
        k: {
            "start": {q: percentile(r["start"], q) for q in QUANTILES},
            "finish": {q: percentile(r["finish"], q) for q in QUANTILES},
            "samples": len(r["start"]),
        }
        for k, r in results.items()
    }
    from .. import report

    s.plots.append(report.plot_latency(bench.out, results, NAMES))


def _one_rep(
    bench: Bench, system: System, rep: int, *, processes: int, concurrency: int
) -> tuple[list[tuple[float, float]], float]:
    """Offer latency_rate jobs/s for latency_seconds into idle workers; gate; return the pairs and the rate offered."""
    rate, secs = bench.p.latency_rate, bench.p.latency_seconds
    with Procs(bench.logs) as procs:
        system.start_workers(procs, processes=processes, concurrency=concurrency, tag=f"lat-{system.key}-{rep}")
        system.warm_up(procs, processes * concurrency)
        run = f"latency {system.name} rep {rep + 1}"
        began = time.monotonic()
        n = int(rate * secs)
        for i in range(n):
            delay = began + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            system.enqueue("noop")
        offered = time.monotonic() - began
        wait_for(lambda: system.unfinished() == 0, timeout=120, interval=0.05, what=f"{run} to drain", procs=procs)
        wall = time.monotonic() - began
    o = system.outcome()
    bench.gate_outcome(run, o, n=n, attempts=n)
    pairs = system.latencies()
    bench.gate.check(run, f"a latency sample for every job ({len(pairs)})", len(pairs) == n)
    bench.gate.window(run, [x for pair in pairs for x in pair], wall)
    bench.say(
        f"  {run}: start p50 {1000 * percentile([a for a, _ in pairs], 50):.1f} ms, "
        f"p99 {1000 * percentile([a for a, _ in pairs], 99):.1f} ms"
    )
    return pairs, n / offered
