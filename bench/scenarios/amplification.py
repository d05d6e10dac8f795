"""Retry amplification: attempts per job under transient failures, against the theory of a bounded budget."""

from __future__ import annotations

import time

from ..core import Procs, wait_for
from ..systems import _one
from .context import Bench
from .helpers import Section, table
from .registry import scenario


@scenario(
    "amplification",
    title="Retry amplification: attempts per job under transient failures",
    knobs=("flaky_rates", "flaky_jobs", "fleet"),
)
def amplification(bench: Bench, s: Section) -> None:
    from ..jobs import FLAKY_BUDGET

    p = bench.p
    n = p.flaky_jobs
    s.intro = (
        f"{n:,} jobs per failure rate p; each attempt fails transiently with probability p (a hash of the "
        f"job id and attempt number), budget {FLAKY_BUDGET} attempts. Theory: E[attempts] = "
        f"(1 - p^{FLAKY_BUDGET}) / (1 - p); a job ends DEAD with probability p^{FLAKY_BUDGET}. Backoff is "
        "shortened (base 5 ms, cap 20 ms) so the run takes seconds; it changes when, not how often."
    )
    bench.rq.reset()
    fc = p.fleet[1]
    rows = []
    worst = 0.0
    data = {}
    with Procs(bench.logs) as procs:
        bench.rq.start_workers(
            procs,
            processes=1,
            concurrency=fc,
            tag="amp",
            RELIABLEQ_BACKOFF_BASE_SECONDS="0.005",
            RELIABLEQ_BACKOFF_MAX_SECONDS="0.02",
            RELIABLEQ_LOG_LEVEL="WARNING",
        )
        bench.rq.warm_up(procs, fc)
        began = time.monotonic()
        for rate in p.flaky_rates:
            bench.rq.load(n, "flaky", {"rate": rate})
        total = n * len(p.flaky_rates)
        wait_for(
            lambda: bench.rq.unfinished() == 0, timeout=300, interval=0.1, what="flaky jobs to settle", procs=procs
        )
        wall = time.monotonic() - began
    run = "amplification"
    o = bench.rq.outcome()
    bench.gate_outcome(run, o, n=total, attempts=None, dead=None)  # how many retry or die is what is measured
    over = _one("SELECT count(*) FROM reliableq_job WHERE attempts > max_attempts")[0]
    bench.gate.check(run, "no job over its budget", over == 0)
    bench.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
    for rate in p.flaky_rates:
        attempts, dead = _one(
            "SELECT sum(attempts), count(*) FILTER (WHERE status = 'DEAD') FROM reliableq_job "
            "WHERE (payload->>'rate')::float8 = %s",
            [rate],
        )
        measured = float(attempts) / n
        theory = sum(rate**k for k in range(FLAKY_BUDGET))
        err = abs(measured - theory) / theory
        worst = max(worst, err)
        rows.append(
            [
                f"{rate:.0%}",
                f"{measured:.4f}",
                f"{theory:.4f}",
                f"{100 * err:.2f}%",
                f"{dead / n:.4f}",
                f"{rate**FLAKY_BUDGET:.4f}",
            ]
        )
        data[rate] = {"measured": measured, "theory": theory, "dead": dead / n}
        bench.say(f"  amplification p={rate:g}: {measured:.4f} attempts/job (theory {theory:.4f})")
    bench.rq.reset()
    s.tables.append(
        table(["failure rate", "attempts per job", "theory", "error", "dead fraction", "theory dead"], rows)
    )
    s.notes.append(
        "Peers: not measured. django-tasks-db has no retries (a failed task stays FAILED); procrastinate "
        "retries as configured per task, with no budget counted at claim, so a job that crashes its "
        "worker is not charged an attempt."
    )
    bench.results["amplification"] = worst
    s.data = {f"{k:g}": v for k, v in data.items()}
    from .. import report

    s.plots.append(report.plot_amplification(bench.out, data))
