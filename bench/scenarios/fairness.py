"""Fair share: small tenants behind one tenant's flood, FIFO against fair; the flood alone; the claim's cost."""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from ..core import Procs, Summary, percentile, ratio, wait_for
from ..systems import QUEUE, _all, _exec
from .context import Bench
from .helpers import Section, fmt_pct, table
from .registry import scenario

FAIR_ENV = {"BENCH_FAIR": "1"}  # registers bench.fair and bench.unfair in the workers (bench/jobs.py)
FAIR, UNFAIR = "bench.fair", "bench.unfair"
FLOOD = "flood"
CLAIMS = 400  # claims timed per arm of the claim's cost
CLAIM_SIZE = 16


@scenario(
    "fairness",
    title="Fair share: one tenant's flood and many small tenants",
    knobs=("reps", "fleet", "fair_flood", "fair_tenants", "fair_tenant_jobs", "fair_keys", "seconds"),
)
def fairness(bench: Bench, s: Section) -> None:
    from ..jobs import register_fair_kinds

    register_fair_kinds()
    p = bench.p
    fp, fc = p.fleet
    small = p.fair_tenants * p.fair_tenant_jobs
    s.intro = (
        f"No-op jobs on a fleet of {fp} x {fc} whose workers know the fair kind `{FAIR}` and the plain kind "
        f"`{UNFAIR}`. (a) One tenant's {p.fair_flood:,} jobs are enqueued in one commit, then, while the fleet "
        f"works on them, {p.fair_tenants} small tenants' {p.fair_tenant_jobs} jobs each ({small:,} in all), one "
        "commit per tenant: FIFO (the plain kind, each tenant named in the payload) against fair (the fair "
        "kind, each tenant its fair_key), alternating. A small tenant's start delay is its job's first "
        "attempt's start minus its created_at. (b) The flood alone, every job of one key, on workers that know "
        "a fair kind against workers that know none (the plain claim), alternating sweeps. (c) The claim's "
        f"own time in the bench process, no worker running: three queues of {p.fair_keys * 5:,} due jobs (the "
        f"plain kind; the fair kind over 10 keys; over {p.fair_keys:,} keys), {CLAIMS} claims of {CLAIM_SIZE} "
        "from each, in turn."
    )
    # (a) FIFO against fair, alternating which goes first.
    delays: dict[str, list[list[float]]] = {"fifo": [], "fair": []}
    flood_rates: dict[str, Summary] = {
        arm: bench.repetitions(jobs=f"{p.fair_flood:,} of one tenant + {small:,}", workers=f"{fp} x {fc}", arm=arm)
        for arm in ("fifo", "fair")
    }
    with Procs(bench.logs) as procs:
        bench.rq.start_workers(procs, processes=fp, concurrency=fc, tag="fair", **FAIR_ENV)
        bench.rq.warm_up(procs, fp * fc)
        for rep in range(p.reps):
            order = ("fifo", "fair") if rep % 2 == 0 else ("fair", "fifo")
            for arm in order:
                waited, rate = _flood_then_tenants(bench, procs, arm, f"fairness {arm} rep {rep + 1}")
                delays[arm].append(waited)
                flood_rates[arm].values.append(rate)
    rows = []
    for arm in ("fifo", "fair"):
        for rep, waited in enumerate(delays[arm]):
            rows.append(
                [
                    arm,
                    rep + 1,
                    f"{percentile(waited, 50):.3f}",
                    f"{percentile(waited, 99):.3f}",
                    f"{max(waited):.3f}",
                    f"{flood_rates[arm].values[rep]:,.0f}",
                ]
            )
    s.tables.append(
        f"**(a) {p.fair_tenants} small tenants' start delay behind one tenant's {p.fair_flood:,} jobs, "
        f"{fp} x {fc}**\n\n"
        + table(["claims", "repetition", "delay p50 s", "delay p99 s", "delay max s", "all jobs/s"], rows)
    )
    fair_p99 = Summary([percentile(w, 99) for w in delays["fair"]])
    fifo_p99 = Summary([percentile(w, 99) for w in delays["fifo"]])

    # (b) The flood alone: a fair kind with one key against the plain claim, alternating sweeps.
    plain = bench.repetitions(job="noop", workers=f"{fp} x {fc}", run="fairness-plain")
    alone = bench.repetitions(job="fair, one key", workers=f"{fp} x {fc}", run="fairness-alone")
    for _ in range(p.reps):
        bench.sweep(
            bench.rq, processes=fp, concurrency=fc, job="noop", tag="fair-plain", guess=2000, reps=1, into=plain
        )
        bench.sweep(
            bench.rq,
            processes=fp,
            concurrency=fc,
            job="fair",
            tag="fair-alone",
            guess=2000,
            reps=1,
            env=FAIR_ENV,
            into=alone,
        )
    paired = [ratio(a, b) for a, b in zip(alone.values, plain.values, strict=True)]
    s.tables.append(
        f"**(b) One key alone: the fair kind against the plain claim, {fp} x {fc}, alternating**\n\n"
        + table(
            ["claims", "jobs/s (range)", "of the plain claim"],
            [
                ["plain kind, workers that know no fair kind", plain.text(), ""],
                [
                    "fair kind, one key",
                    alone.text(),
                    f"{fmt_pct(ratio(alone.median, plain.median))} ({fmt_pct(min(paired))}–{fmt_pct(max(paired))})",
                ],
            ],
        )
    )

    # (c) The claim's own time beside many keys, side by side.
    claim_ms = _claim_times(bench, p.fair_keys)
    rows = [
        [arm, f"{percentile(ms, 50):.2f}", f"{percentile(ms, 99):.2f}", f"{max(ms):.2f}"]
        for arm, ms in claim_ms.items()
    ]
    s.tables.append(
        f"**(c) One claim of {CLAIM_SIZE}, {CLAIMS} from each queue in turn, no worker running: each queue holds "
        f"{p.fair_keys * 5:,} due jobs (the plain kind; the fair kind over 10 keys; over {p.fair_keys:,} keys)**\n\n"
        + table(["queue", "p50 ms", "p99 ms", "max ms"], rows)
    )
    s.notes.append(
        "Goals: each small tenant's p99 start delay under one second with fair claims (FIFO: the flood's length); "
        "the flood alone at >= 90% of the plain claim's rate; the claim's p99 flat in the number of keys (many "
        "keys against 10)."
    )
    bench.results["fairness"] = {
        "fair_p99": fair_p99,
        "fifo_p99": fifo_p99,
        "alone": alone,
        "plain": plain,
        "claim_p99_ms": percentile(claim_ms["fair, many keys"], 99),
        "few_keys_claim_p99_ms": percentile(claim_ms["fair, 10 keys"], 99),
        "plain_claim_p99_ms": percentile(claim_ms["plain"], 99),
        "keys": p.fair_keys,
    }
    s.data = {
        "delays_s": delays,
        "flood_rates": {arm: summary.to_json() for arm, summary in flood_rates.items()},
        "alone": alone.to_json(),
        "plain": plain.to_json(),
        "alone_paired_ratios": paired,
        "claim_ms": claim_ms,
    }


def _flood_then_tenants(bench: Bench, procs: Procs, arm: str, run: str) -> tuple[list[float], float]:
    """The flood in one commit, then each small tenant in a commit of its own; gate; (delays s, jobs/s)."""
    import reliableq

    p = bench.p
    kind = FAIR if arm == "fair" else UNFAIR
    bench.rq.reset()
    began = time.monotonic()

    def enqueue(tenant: str, count: int) -> None:
        options: dict[str, Any] = {"queue": QUEUE}
        if arm == "fair":
            options["fair_key"] = tenant
        with transaction.atomic():
            reliableq.enqueue_many(kind, [{"t": tenant}] * count, **options)

    enqueue(FLOOD, p.fair_flood)
    # The fleet is at work on the flood before the first small tenant arrives.
    wait_for(lambda: bench.rq.running() > 0, timeout=60, what=f"{run}: the flood's first claims", procs=procs)
    for n in range(p.fair_tenants):
        enqueue(f"tenant-{n}", p.fair_tenant_jobs)
    total = p.fair_flood + p.fair_tenants * p.fair_tenant_jobs
    wait_for(
        lambda: bench.rq.unfinished() == 0,
        timeout=max(120.0, total / 200),
        interval=0.1,
        what=f"{run}: {total:,} jobs to finish",
        procs=procs,
    )
    wall = time.monotonic() - began
    o = bench.rq.outcome()
    bench.gate_outcome(run, o, n=total, attempts=total)
    bench.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
    waited = [
        float(w)
        for (w,) in _all(
            """
            SELECT extract(epoch FROM a.started_at - j.created_at)
              FROM reliableq_job j JOIN reliableq_attempt a ON a.job_id = j.id AND a.number = 1
             WHERE j.payload->>'t' <> %s
            """,
            [FLOOD],
        )
    ]
    bench.gate.check(run, f"every small tenant's job started ({len(waited)})", len(waited) == total - p.fair_flood)
    rate = total / o.span
    bench.say(
        f"  {run}: small tenants' delay p50 {percentile(waited, 50):.3f} s, p99 {percentile(waited, 99):.3f} s, "
        f"max {max(waited):.3f} s; {rate:,.0f} jobs/s"
    )
    return waited, rate


def _claim_times(bench: Bench, keys: int) -> dict[str, list[float]]:
    """Milliseconds per claim of CLAIM_SIZE, side by side: three queues of keys x 5 due jobs each (the plain
    kind; the fair kind over 10 keys; over `keys` keys), claimed from in turn, CLAIMS claims each."""
    import reliableq
    from reliableq import queue as jobqueue
    from reliableq import services
    from reliableq.options import JobOptions
    from reliableq.registry import Limits

    arms = {
        "plain": (f"{QUEUE}-plain", 0),
        "fair, 10 keys": (f"{QUEUE}-k10", 10),
        "fair, many keys": (f"{QUEUE}-kn", keys),
    }
    bench.rq.reset()
    with transaction.atomic():
        for queue, spread in arms.values():
            if not spread:
                reliableq.enqueue_many(UNFAIR, [{}] * (keys * 5), queue=queue)
                continue
            jobs = [
                services.NewJob(kind=FAIR, payload={}, options=JobOptions(queue=queue, fair_key=f"k{i % spread}"))
                for i in range(keys * 5)
            ]
            for start in range(0, len(jobs), 1000):
                services.submit_many(jobs[start : start + 1000])
    _exec("ANALYZE reliableq_job")
    limits = {FAIR: Limits(fair=True)}
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(CLAIMS):
        for arm, (queue, _spread) in arms.items():
            began = time.perf_counter()
            jobqueue.claim(
                worker_id="bench-claims",
                queues=(queue,),
                limit=CLAIM_SIZE,
                lease_seconds=60,
                limits=limits,
                rescue=False,
            )
            times[arm].append(1000 * (time.perf_counter() - began))
    bench.rq.reset()
    for arm, ms in times.items():
        bench.say(f"  fairness claim ({arm}): p50 {percentile(ms, 50):.2f} ms, p99 {percentile(ms, 99):.2f} ms")
    return times
