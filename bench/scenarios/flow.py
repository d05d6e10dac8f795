"""Flow control's cost to the claim: the fleet's no-op rate with 1,000 concurrency keys at
max_running_per_key=1, and under a rate limit far above what the fleet can offer, beside the same
run without limits."""

from __future__ import annotations

from ..core import Summary, ratio
from .context import Bench
from .helpers import Section, fmt_pct, table
from .registry import scenario

FLOW_ENV = {"BENCH_FLOW": "1"}  # registers bench.keyed and bench.rated in the workers (bench/jobs.py)


@scenario("flow", title="Flow control: claims under per-key and rate limits", knobs=("reps", "seconds", "fleet"))
def flow(bench: Bench, s: Section) -> None:
    fp, fc = bench.p.fleet
    from ..jobs import KEYS, RATE, register_flow_kinds

    register_flow_kinds()

    s.intro = (
        f"No-op jobs on a fleet of {fp} x {fc}, three ways, one after the other in one run: no limits "
        f"(workers that know no limited kind, so each claim is one autocommit statement); every job "
        f"with one of {KEYS:,} concurrency keys of a kind with max_running_per_key=1; every job of a "
        f"kind with rate_limit={RATE!r}, far above what the fleet can start. The limited runs' workers "
        "claim each limited kind after the unlimited ones, by one statement of its own in autocommit "
        "(it locks a shard of the rate window's row, or tries each key's advisory lock and counts the "
        "key's running jobs under it). The rate is N over the span the database recorded from the "
        "first start to the last finish."
    )
    runs: dict[str, Summary] = {}
    bench.say("flow: no limits")
    runs["none"] = bench.sweep(bench.rq, processes=fp, concurrency=fc, job="noop", tag="flow-none", guess=800)
    bench.say(f"flow: {KEYS:,} keys at max_running_per_key=1")
    runs["keyed"] = bench.sweep(
        bench.rq, processes=fp, concurrency=fc, job="keyed", tag="flow-keys", guess=800, env=FLOW_ENV
    )
    bench.say(f"flow: rate_limit {RATE}")
    runs["rated"] = bench.sweep(
        bench.rq, processes=fp, concurrency=fc, job="rated", tag="flow-rate", guess=800, env=FLOW_ENV
    )
    base = runs["none"].median
    labels = {
        "none": "no limits",
        "keyed": f"{KEYS:,} concurrency keys, max_running_per_key=1",
        "rated": f"rate_limit={RATE}",
    }
    rows = [[labels[k], summary.text(), fmt_pct(ratio(summary.median, base))] for k, summary in runs.items()]
    s.tables.append(table(["claims", "ReliableQ jobs/s", "of no limits"], rows))
    bench.results["flow"] = runs
