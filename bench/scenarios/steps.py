"""Durable steps: what a step and a checkpoint cost against an empty job, a long job of steps, emits
waking parked jobs, and the claim beside 100,000 parked jobs (sleeping or waiting) against none."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from pathlib import Path

from ..core import Procs, percentile, wait_for
from ..systems import QUEUE, _exec, _one
from .context import Bench
from .helpers import Section, table
from .registry import scenario
from .schedules import _claims_since

STEPS_QUEUE = "bench-steps"  # the in-process runs' queue; no worker serves it
# The first arm: what every job costs (its claim and its finish); the others add one call each.
COST_ARMS: dict[str, dict[str, int]] = {"empty job": {}, "one step": {"steps": 1}, "one checkpoint": {"checkpoints": 1}}
PARKED_ARMS = ("none", "sleeping", "waiting")
# The statements of one commit count reading: the read before (counted in the next) and the flush after.
COUNT_OVERHEAD = 2
GOAL_STEP_MS = 0.5
GOAL_CLAIM_RATIO = 1.10


@scenario(
    "steps",
    title="Durable steps: a step's cost, a long job, emits, the claim beside parked jobs",
    knobs=(
        "reps",
        "steps_jobs",
        "steps_long",
        "steps_waiters",
        "steps_parked",
        "steps_window",
        "latency_rate",
        "fleet",
    ),
)
def steps_cost(bench: Bench, s: Section) -> None:
    from reliableq import registry

    registry.autodiscover()  # bench.steps and bench.waiter, run in this process
    p = bench.p
    s.intro = (
        f"In the harness's own process, through the worker's path (reliableq.testing.run_due: the claim, the "
        f"handler, the fenced finish), each repetition, side by side: {p.steps_jobs} jobs of each arm (an empty "
        f"job; one step of a function that does nothing; one checkpoint), a job of {p.steps_long:,} steps, and "
        f"{p.steps_waiters:,} jobs parked WAITING, woken by as many emits (each its own transaction). A step's "
        "cost is its own call (job.step, timed inside the handler) and the job's time against the empty job's; "
        "commits are pg_stat_database's xact_commit (flushed, the counting's own subtracted), write transactions "
        "the transaction ids used. Then one worker (1 x "
        f"{p.fleet[1]}) serves a steady load ({p.latency_rate:g} no-op jobs/s, {p.steps_window:g} s an arm) beside "
        f"no parked job, {p.steps_parked:,} sleeping (PENDING, run_at a day ahead) or {p.steps_parked:,} WAITING "
        "for events (made so by an UPDATE, as a park leaves them; then VACUUM ANALYZE, as autovacuum would); each "
        "claim's time is the worker's own log of it."
    )
    cost: dict[str, list[dict[str, float]]] = {arm: [] for arm in COST_ARMS}
    long: list[dict[str, float]] = []
    emits: list[dict[str, float]] = []
    claims: dict[str, list[dict[str, float]]] = {arm: [] for arm in PARKED_ARMS}
    try:
        for arm in COST_ARMS:  # first connections, first statements: not measured
            _cost_arm(bench, arm, min(10, p.steps_jobs), -1)
        for rep in range(p.reps):
            arms = list(COST_ARMS) if rep % 2 == 0 else list(reversed(COST_ARMS))
            for arm in arms:
                cost[arm].append(_cost_arm(bench, arm, p.steps_jobs, rep))
            long.append(_long_job(bench, p.steps_long, rep))
            emits.append(_emits(bench, p.steps_waiters, rep))
        claims_log = bench.out / "steps-claims.log"
        with Procs(bench.logs) as procs:
            bench.rq.start_workers(procs, processes=1, concurrency=p.fleet[1], tag="steps",
                                   BENCH_CLAIM_LOG=str(claims_log))  # fmt: skip
            bench.rq.warm_up(procs, p.fleet[1])
            for rep in range(p.reps):
                for arm in PARKED_ARMS if rep % 2 == 0 else tuple(reversed(PARKED_ARMS)):
                    claims[arm].append(_claim_window(bench, procs, arm, rep, claims_log))
    finally:
        bench.rq.reset()

    def med(values: list[float]) -> float:
        values = sorted(values)
        return values[len(values) // 2] if values else float("nan")

    def span(values: list[float], fmt: str) -> str:
        text = format(med(values), fmt)
        return text if len(values) < 2 else f"{text} ({format(min(values), fmt)}–{format(max(values), fmt)})"

    empty = cost["empty job"]
    # A long job's commits beyond an empty job's (its claim and finish), per step.
    for r, e in zip(long, empty, strict=True):
        r["net_commits_per_step"] = (r["commits"] - e["commits_per_job"]) / p.steps_long
    rows = []
    for arm, runs in cost.items():
        extra_ms = [r["job_ms_p50"] - e["job_ms_p50"] for r, e in zip(runs, empty, strict=True)]
        extra_commits = [r["commits_per_job"] - e["commits_per_job"] for r, e in zip(runs, empty, strict=True)]
        extra_writes = [r["writes_per_job"] - e["writes_per_job"] for r, e in zip(runs, empty, strict=True)]
        rows.append([
            arm, span([r["job_ms_p50"] for r in runs], ".2f"),
            "" if arm == "empty job" else span(extra_ms, "+.2f"),
            "" if arm == "empty job" else span([r["call_ms_p50"] for r in runs], ".3f"),
            "" if arm == "empty job" else span([r["call_ms_p99"] for r in runs], ".3f"),
            span([r["commits_per_job"] for r in runs], ".2f"),
            "" if arm == "empty job" else span(extra_commits, "+.2f"),
            "" if arm == "empty job" else span(extra_writes, "+.2f"),
        ])  # fmt: skip
    s.tables.append(
        table(
            [
                "arm",
                "job ms p50",
                "vs empty",
                "call ms p50",
                "call ms p99",
                "commits/job",
                "commits vs empty",
                "write xacts vs empty",
            ],
            rows,
        )
    )
    s.tables.append(
        table(
            [
                f"{p.steps_long:,}-step job",
                "ms per step (mean)",
                "call ms p50",
                "call ms p99",
                "commits per step (net)",
                "write xacts per step",
                "job s",
            ],
            [
                [
                    "",
                    span([r["ms_per_step"] for r in long], ".3f"),
                    span([r["call_ms_p50"] for r in long], ".3f"),
                    span([r["call_ms_p99"] for r in long], ".3f"),
                    span([r["net_commits_per_step"] for r in long], ".3f"),
                    span([r["writes_per_step"] for r in long], ".3f"),
                    span([r["seconds"] for r in long], ".2f"),
                ]
            ],
        )
    )
    s.tables.append(
        table(
            ["waiting jobs", "emits/s (each woke one)", "parked in s"],
            [
                [
                    f"{p.steps_waiters:,}",
                    span([r["woken_per_s"] for r in emits], ",.0f"),
                    span([r["park_seconds"] for r in emits], ".2f"),
                ]
            ],
        )
    )
    base99 = med([c["claim_p99_ms"] for c in claims["none"]])
    claim_rows = [
        [
            "none" if arm == "none" else f"{p.steps_parked:,} {arm}",
            span([c["claim_p50_ms"] for c in claims[arm]], ".2f"),
            span([c["claim_p99_ms"] for c in claims[arm]], ".2f"),
            f"{med([c['claim_p99_ms'] for c in claims[arm]]) / base99:.2f}x",
            span([c["claims"] for c in claims[arm]], ".0f"),
        ]
        for arm in PARKED_ARMS
    ]
    s.tables.append(table(["parked jobs", "claim ms p50", "claim ms p99", "p99 vs none", "claims"], claim_rows))
    step_ms = med([r["call_ms_p50"] for r in cost["one step"]])
    ratios = {arm: med([c["claim_p99_ms"] for c in claims[arm]]) / base99 for arm in PARKED_ARMS}
    later_ms = med([r["call_ms_p50"] for r in long])
    s.notes.append(
        f"Medians over {p.reps} repetition(s), each one's range in brackets. Goals: a step under {GOAL_STEP_MS} ms "
        f"(a job's first step {step_ms:.3f} ms: {'met' if step_ms < GOAL_STEP_MS else 'missed'}; a step in the "
        f"{p.steps_long:,}-step job {later_ms:.3f} ms: {'met' if later_ms < GOAL_STEP_MS else 'missed'}) and one "
        f"commit per step ({med([r['net_commits_per_step'] for r in long]):.3f} over {p.steps_long:,} steps, beyond "
        "an empty job's; one write transaction a step; a retried attempt's first step also reads what the job "
        "recorded, one read-only transaction that attempt); the claim's p99 beside parked jobs "
        f"within {100 * (GOAL_CLAIM_RATIO - 1):.0f}% of none's: "
        + "; ".join(f"{arm} {ratios[arm]:.2f}x" for arm in PARKED_ARMS if arm != "none")
        + "."
    )
    s.data = {"cost": cost, "long": long, "emits": emits, "claims": claims, "claim_p99_ratio": ratios}
    bench.results["steps"] = {
        "step_call_ms_p50": step_ms,
        "commits_per_step": med([r["net_commits_per_step"] for r in long]),
        "woken_per_s": med([r["woken_per_s"] for r in emits]),
        "claim_p99_ratio": ratios,
    }


def _counts() -> tuple[int, int]:
    """(commits of this database, the next transaction id), after this backend's statistics are flushed."""
    _exec("SELECT pg_stat_force_next_flush()")  # flushed when this statement's transaction ends
    commits, xmax = _one(
        "SELECT xact_commit, pg_snapshot_xmax(pg_current_snapshot())::text::bigint FROM pg_stat_database "
        "WHERE datname = current_database()"
    )
    return int(commits), int(xmax)


def _since(before: tuple[int, int]) -> tuple[int, int]:
    commits, xmax = _counts()
    return commits - before[0] - COUNT_OVERHEAD, xmax - before[1]


def _run_all(bench: Bench, run: str, n: int) -> list[float]:
    """Run the steps queue's n due jobs here, one at a time; the seconds of each (claim, handler, finish)."""
    from reliableq.testing import run_due

    times, succeeded = [], 0
    for _ in range(n):
        began = time.perf_counter()
        ran = run_due([STEPS_QUEUE], limit=1)
        times.append(time.perf_counter() - began)
        succeeded += sum(1 for r in ran if r.status == "SUCCEEDED")
    bench.gate.check(run, f"{n} runs, each of one job, SUCCEEDED", succeeded == n)
    return times


def _cost_arm(bench: Bench, arm: str, n: int, rep: int) -> dict[str, float]:
    from reliableq import services

    from .. import jobs

    run = f"steps {arm} " + ("warm-up" if rep < 0 else f"rep {rep + 1}")
    bench.rq.reset()
    services.enqueue_many("bench.steps", [COST_ARMS[arm]] * n, queue=STEPS_QUEUE)
    jobs.STEP_CALLS.clear()
    before = _counts()
    times = _run_all(bench, run, n)
    commits, writes = _since(before)
    calls = list(jobs.STEP_CALLS)
    bench.gate.check(run, f"{len(calls)} calls timed", len(calls) == (n if COST_ARMS[arm] else 0))
    figures = {
        "job_ms_p50": 1000 * percentile(times, 50),
        "call_ms_p50": 1000 * percentile(calls, 50) if calls else 0.0,
        "call_ms_p99": 1000 * percentile(calls, 99) if calls else 0.0,
        "commits_per_job": commits / n,
        "writes_per_job": writes / n,
    }
    bench.say(f"  {run}: job p50 {figures['job_ms_p50']:.2f} ms, {figures['commits_per_job']:.2f} commits a job")
    return figures


def _long_job(bench: Bench, n: int, rep: int) -> dict[str, float]:
    from reliableq import services

    from .. import jobs

    run = f"steps {n}-step job rep {rep + 1}"
    bench.rq.reset()
    services.enqueue_many("bench.steps", [{"steps": n}], queue=STEPS_QUEUE)
    jobs.STEP_CALLS.clear()
    before = _counts()
    (seconds,) = _run_all(bench, run, 1)
    commits, writes = _since(before)
    calls = list(jobs.STEP_CALLS)
    (recorded,) = _one("SELECT count(*) FROM reliableq_step WHERE kind = 'STEP'")
    bench.gate.check(run, f"{n} steps recorded", recorded == n and len(calls) == n)
    figures = {
        "seconds": seconds,
        "ms_per_step": 1000 * sum(calls) / n,
        "call_ms_p50": 1000 * percentile(calls, 50),
        "call_ms_p99": 1000 * percentile(calls, 99),
        "commits": commits,  # the job's claim and finish included
        "commits_per_step": commits / n,
        "writes_per_step": writes / n,
    }
    bench.say(f"  {run}: {figures['ms_per_step']:.3f} ms and {figures['commits_per_step']:.3f} commits a step")
    return figures


def _emits(bench: Bench, n: int, rep: int) -> dict[str, float]:
    import reliableq
    from reliableq import services
    from reliableq.testing import run_due

    run = f"steps emits rep {rep + 1}"
    bench.rq.reset()
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    services.enqueue_many("bench.waiter", [{"event": f"{prefix}-{i}"} for i in range(n)], queue=STEPS_QUEUE)
    began = time.perf_counter()
    while run_due([STEPS_QUEUE], limit=100):
        pass
    parked = time.perf_counter() - began
    (waiting,) = _one("SELECT count(*) FROM reliableq_job WHERE status = 'WAITING' AND waiting_for IS NOT NULL")
    bench.gate.check(run, f"{n} jobs parked WAITING", waiting == n)
    began = time.perf_counter()
    woken = sum(reliableq.emit(f"{prefix}-{i}").woken for i in range(n))  # type: ignore[attr-defined]
    seconds = time.perf_counter() - began
    (pending,) = _one("SELECT count(*) FROM reliableq_job WHERE status = 'PENDING' AND queue = %s", [STEPS_QUEUE])
    bench.gate.check(run, f"each emit woke its job ({woken} woken, {pending} PENDING)", woken == pending == n)
    _exec("DELETE FROM reliableq_event WHERE name LIKE %s", [f"{prefix}-%"])
    bench.say(f"  {run}: {n / seconds:,.0f} emits/s, each waking its job")
    return {"woken_per_s": n / seconds, "park_seconds": parked}


def _park(arm: str, n: int) -> None:
    """n jobs of the served queue that no claim may take: sleeping (PENDING a day ahead) or WAITING."""
    from django.db import transaction

    from reliableq import services

    if arm == "none":
        return
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    with transaction.atomic():
        ids = services.enqueue_many("bench.waiter", [{"event": "never"}] * n, queue=QUEUE, run_at=later)
        if arm == "waiting":  # what a park of a wait with no timeout leaves
            _exec(
                "UPDATE reliableq_job SET status = 'WAITING', waiting_for = 'bench-never-' || id::text, "
                "run_at = '9999-12-31 00:00:00+00' WHERE id = ANY(%s::uuid[])",
                [[str(i) for i in ids]],
            )
    # As autovacuum leaves them: the rows the UPDATE replaced are gone from the due index, the statistics new.
    _exec("VACUUM ANALYZE reliableq_job")


def _claim_window(bench: Bench, procs: Procs, arm: str, rep: int, claims_log: Path) -> dict[str, float]:
    p = bench.p
    run = f"steps claim beside {arm} rep {rep + 1}"
    bench.rq.reset()
    _park(arm, p.steps_parked)
    offset = claims_log.stat().st_size if claims_log.exists() else 0
    began, wall_began, made = time.monotonic(), time.time(), 0
    while time.monotonic() - began < p.steps_window:
        due = began + made / p.latency_rate - time.monotonic()
        if due > 0:
            time.sleep(due)
        bench.rq.enqueue("noop")
        made += 1
        procs.check_alive()
    seconds = time.monotonic() - began
    wait_for(lambda: _offered_unfinished() == 0, timeout=120, interval=0.05, what=f"{run}: the load to finish",
             procs=procs)  # fmt: skip
    bench.gate_outcome(run, bench.rq.outcome("j.kind = 'bench.noop'"), n=made, attempts=made)
    (parked,) = _one("SELECT count(*) FROM reliableq_job WHERE kind = 'bench.waiter' AND attempts = 0")
    bench.gate.check(run, f"{parked} parked jobs never claimed", parked == (0 if arm == "none" else p.steps_parked))
    times = [ms for at, ms in _claims_since(claims_log, offset) if wall_began <= at <= wall_began + seconds]
    figures = {
        "claim_p50_ms": percentile(times, 50),
        "claim_p99_ms": percentile(times, 99),
        "claims": float(len(times)),
    }
    bench.say(f"  {run}: claim p50 {figures['claim_p50_ms']:.2f} ms, p99 {figures['claim_p99_ms']:.2f} ms")
    return figures


def _offered_unfinished() -> int:
    return int(
        _one(
            "SELECT (SELECT count(*) FROM reliableq_job WHERE status = 'PENDING' AND kind = 'bench.noop')"
            " + (SELECT count(*) FROM reliableq_job WHERE status = 'RUNNING')"
        )[0]
    )
