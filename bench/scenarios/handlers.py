"""How handlers run: async def against threads for I/O-bound jobs, process isolation against threads, and
the memory of a worker with hundreds of attempts in flight."""

from __future__ import annotations

import time
from pathlib import Path

from ..core import Procs, Summary, ratio, wait_for
from .context import Bench
from .helpers import Section, fmt_pct, fmt_ratio, table
from .registry import scenario

SLEEP = 0.05  # bench.jobs.SLEEP_SECONDS (not imported: bench.jobs needs Django set up)
HELD_SECONDS = 8.0  # how long each attempt of the memory reading sleeps


@scenario(
    "handlers",
    title="How handlers run: async, threads, processes",
    knobs=("reps", "seconds", "min_jobs", "handler_slots"),
)
def handlers(bench: Bench, s: Section) -> None:
    threads_c, async_c, isolated_c = bench.p.handler_slots
    s.intro = (
        f"One worker process each. I/O-bound: a {SLEEP * 1000:.0f} ms handler as a sync function on "
        f"{threads_c} threads, and as `async def` at --concurrency {async_c} (ideal: concurrency / "
        f'{SLEEP:g} s). No-op jobs on {isolated_c} threads against isolation="process" with '
        f"{isolated_c} children, side by side in one run."
    )
    rq = bench.rq
    bench.say(f"handlers: threads 1 x {threads_c}, 50 ms")
    threads = bench.sweep(rq, processes=1, concurrency=threads_c, job="sleep", tag="h-threads",
                          guess=0.8 * threads_c / SLEEP)  # fmt: skip
    bench.say(f"handlers: async 1 x {async_c}, 50 ms")
    coroutines = bench.sweep(rq, processes=1, concurrency=async_c, job="async_sleep", tag="h-async",
                             guess=0.5 * async_c / SLEEP)  # fmt: skip
    bench.say(f"handlers: no-op on threads and in children, 1 x {isolated_c}")
    plain = bench.sweep(rq, processes=1, concurrency=isolated_c, job="noop", tag="h-noop", guess=2000)
    isolated = _isolated(bench, isolated_c)

    rows = [
        [f"sync, {threads_c} threads", f"{threads_c / SLEEP:,.0f}", threads.text(), _of(threads, threads_c / SLEEP)],
        [f"async def, --concurrency {async_c}", f"{async_c / SLEEP:,.0f}", coroutines.text(),
         _of(coroutines, async_c / SLEEP)],
    ]  # fmt: skip
    s.tables.append(table(["50 ms jobs, one process", "ideal jobs/s", "jobs/s", "of ideal"], rows))
    s.notes.append(f"async / threads: {fmt_ratio(ratio(coroutines.median, threads.median))} (goal: 5,000 jobs/s).")
    extra_us = 1e6 * isolated_c * (1 / isolated.median - 1 / plain.median) if isolated.median and plain.median else 0.0
    s.tables.append(
        table(
            ["no-op jobs, one process", "jobs/s", "of threads"],
            [
                [f"{isolated_c} threads", plain.text(), "100%"],
                [f'isolation="process", {isolated_c} children', isolated.text(), _of(isolated, plain.median)],
            ],
        )
    )
    s.notes.append(
        f"Process isolation costs each slot about {extra_us:,.0f} µs per attempt more than a thread "
        f"({isolated_c} slots x (1 / isolated rate - 1 / thread rate)); goal: at least 40% of the thread rate."
    )
    memory = _memory(bench, async_c)
    s.tables.append(
        table(
            [f"{async_c} attempts in flight, {HELD_SECONDS:g} s each", "worker RSS, MB", "threads"],
            [[label, f"{rss:,.0f}", str(n)] for label, (rss, n) in memory.items()],
        )
    )
    s.data = {
        "threads": threads.to_json(),
        "async": coroutines.to_json(),
        "noop_threads": plain.to_json(),
        "noop_isolated": isolated.to_json(),
        "isolation_extra_us": extra_us,
        "memory": {k: {"rss_mb": v[0], "threads": v[1]} for k, v in memory.items()},
    }


def _of(rates: Summary, ideal: float) -> str:
    text = fmt_pct(rates.median / ideal)
    return text if len(rates.values) < 2 else f"{text} ({fmt_pct(rates.low / ideal)}–{fmt_pct(rates.high / ideal)})"


def _isolated(bench: Bench, slots: int) -> Summary:
    """Like bench.sweep, warmed up with isolated jobs, so that the children's start-up is not measured."""
    rq = bench.rq
    summary = bench.repetitions(system=rq.name, job="isolated_noop", workers=rq.describe(1, slots), run="h-isolated")
    with Procs(bench.logs) as procs:
        rq.start_workers(procs, processes=1, concurrency=slots, tag="h-isolated")
        for job in ("noop", "isolated_noop"):
            rq.reset()
            rq.load(4 * slots, job)
            wait_for(lambda: rq.unfinished() == 0, timeout=180, interval=0.1, what="the warm-up", procs=procs)
        bench._reps(rq, procs, "isolated_noop", f"reliableq:isolated_noop:1x{slots}", "h-isolated", 1, slots, 500,
                    bench.p.reps, summary)  # fmt: skip
    return summary


def _memory(bench: Bench, slots: int) -> dict[str, tuple[float, int]]:
    """A worker's resident memory and threads, idle and with `slots` attempts in flight, async and on threads."""
    rq = bench.rq
    found: dict[str, tuple[float, int]] = {}
    for job, label in (("async_sleep", "async def"), ("sleep_for", "sync, on threads")):
        with Procs(bench.logs) as procs:
            rq.start_workers(procs, processes=1, concurrency=slots, tag=f"h-memory-{job}")
            rq.warm_up(procs, 1)
            (pid,) = [p.pid for p in procs.started]
            found.setdefault("idle, after its warm-up", _status(pid))
            rq.reset()
            rq.load(slots, job, {"seconds": HELD_SECONDS})
            wait_for(lambda: rq.running() >= slots, timeout=60, interval=0.1, what=f"{slots} in flight", procs=procs)
            time.sleep(0.5)  # the last claims' handlers started
            found[label] = _status(pid)
            wait_for(lambda: rq.unfinished() == 0, timeout=120, interval=0.2, what="the held jobs", procs=procs)
            rq.reset()
    return found


def _status(pid: int) -> tuple[float, int]:
    rss, threads = 0.0, 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads
