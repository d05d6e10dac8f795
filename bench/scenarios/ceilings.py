"""Ceilings: the worker's own SQL through pgbench (PostgreSQL's limit) and a bare psycopg loop (Python's)."""

from __future__ import annotations

import math
import statistics
import time
from functools import partial
from pathlib import Path

from django.db import connection

from .. import ceilings as ceiling_sql  # capture the worker's statements, write and run the pgbench script
from ..core import Procs, Summary, median_interval, ratio
from ..systems import QUEUE
from .context import Bench
from .helpers import Section, env, fmt_pct, table
from .registry import scenario


@scenario(
    "ceilings",
    title="Ceilings: PostgreSQL's own limit and bare Python's",
    knobs=("reps", "pairs", "seconds", "min_jobs", "fleet", "ceiling_fused"),
    needs=("throughput",),
)  # stated as fractions of the fleet
def ceilings(bench: Bench, s: Section) -> None:
    fp, fc = bench.p.fleet
    s.intro = (
        f"The same claim and finish statements that the worker sends (captured from `reliableq.queue` at "
        f"run time), with the fleet's {fp} client(s) and batches of {fc} (the worker's concurrency, the "
        "largest claim it makes), in the same transactions: the claim as one autocommit statement "
        "(the worker's periodic rescue, once per POLL_SECONDS, is left out), the finish in BEGIN ... "
        "COMMIT. pgbench: both in a script, `-M prepared`, the batch's ids passed with `\\gset`. Bare "
        "loop: one Python process per client, psycopg only (no Django, threads or handlers), claim "
        "then finish."
    )
    bench.rq.reset()
    spec = ceiling_sql.capture(QUEUE)
    statements = ceiling_sql.write_statements(spec, bench.out / "statements.json")
    script = bench.out / "cycle.pgbench.sql"
    script.write_text(ceiling_sql.pgbench_script(spec, fc, bench.database_url))
    pg = _pgbench(bench, script)
    fused = None
    if bench.p.ceiling_fused:
        fused_script = bench.out / "cycle-fused.pgbench.sql"
        fused_script.write_text(ceiling_sql.pgbench_script(spec, fc, bench.database_url, fused=True))
        fused = _pgbench(bench, fused_script, label="pgbench fused")
    bare = _bare(bench, statements, fp)
    fleet = bench.results["fleet"]
    by_conc = bench.results["throughput"][0]
    one = by_conc.get(fc)
    # One process against one: what the worker's Python adds over the loop's, with no second process.
    # Paired: a repetition of each in turn, so that each ratio compares two runs a few seconds apart.
    paired = _paired_one(bench, statements) if fp != 1 and one is not None else None
    interval = median_interval(paired[2]) if paired else None
    bare_one = paired[1] if paired else bare

    def cycle_ms(rate: float) -> str:
        # Per connection: one claim of a full batch plus its finish, at this rate.
        return f"{1000 * fp * fc / rate:.2f}" if rate and not math.isnan(rate) else "n/a"

    def cycle_ms_range(rates: Summary) -> str:
        # The fastest repetition has the shortest cycle, so the range runs from high to low.
        if len(rates.values) < 2:
            return cycle_ms(rates.median)
        return f"{cycle_ms(rates.median)} ({cycle_ms(rates.high)}–{cycle_ms(rates.low)})"

    rows = [
        [
            "pgbench (PostgreSQL's limit for this SQL)",
            pg.text(),
            cycle_ms_range(pg),
            fmt_pct(ratio(fleet.median, pg.median)),
        ],
        [
            "bare psycopg loop (Python's limit)",
            bare.text(),
            cycle_ms_range(bare),
            fmt_pct(ratio(fleet.median, bare.median)),
        ],
        [f"ReliableQ fleet {fp} x {fc}", fleet.text(), cycle_ms_range(fleet), "100%"],
    ]
    if fused is not None:
        rows.insert(
            1,
            [
                "pgbench, claim and finish in one transaction (a fused statement's bound)",
                fused.text(),
                cycle_ms_range(fused),
                fmt_pct(ratio(fleet.median, fused.median)),
            ],
        )
    if paired is not None:
        worker_one, _, shares = paired
        rows.append(
            [
                f"bare psycopg loop, 1 process, each repetition paired with one of ReliableQ 1 x {fc}, "
                f"the order alternating ({worker_one.text()})",
                bare_one.text(),
                "",
                f"{fmt_pct(statistics.median(shares))} ({fmt_pct(min(shares))}–{fmt_pct(max(shares))} by pair, "
                f"{len(shares)} pairs)",
            ]
        )
        assert interval is not None
        low, high = interval
        s.notes.append(
            f"The paired fraction's median over {len(shares)} pairs, with a 95% bootstrap interval of that "
            f"median: {fmt_pct(statistics.median(shares))} ({fmt_pct(low)}–{fmt_pct(high)}). On this shared "
            "machine a pair moves by some 15%: more pairs (`--set pairs=N`) narrow the interval."
        )
    s.tables.append(
        table(["ceiling", "jobs/s", f"ms per {fc}-job cycle per connection", "ReliableQ as a fraction"], rows)
    )
    s.notes.append(
        f"Per cycle and connection: pgbench {cycle_ms(pg.median)} ms, the bare loop "
        f"{cycle_ms(bare.median)} ms, the ReliableQ worker {cycle_ms(fleet.median)} ms, for two round "
        "trips each (the claim and the fenced finish, each one autocommit statement). What the worker adds to "
        "the bare loop is Django's cursor layer, its ledger and completer, and the hand-offs to and from its "
        "handler threads; what the bare loop adds to pgbench is Python and psycopg (binding, decoding rows). "
        "A fraction near or above 100% means the fleet is bound by the same "
        "round trips as the ceiling, within run-to-run noise (see the ranges)."
    )
    s.notes.append(
        f"The pgbench script is `{script.name}` and the captured statements `{statements.name}` in this "
        "folder. The ceilings always claim full batches; the worker claims into the slots that are "
        "free, which is what it must do."
    )
    bench.results["ceilings"] = {"pgbench": pg, "bare": bare, "bare_one": bare_one}
    s.data = {"pgbench": pg.to_json(), "bare": bare.to_json(), "bare_one": bare_one.to_json()}
    if paired is not None:
        bench.results["paired_one"] = paired  # not a Summary: beside "ceilings", whose values the plot draws
        s.data["worker_one_paired"] = paired[0].to_json()
        s.data["one_to_bare_by_pair"] = paired[2]
        s.data["one_to_bare_median_interval"] = interval
    if fused is not None:
        bench.results["ceilings"]["pgbench_fused"] = fused
        s.data["pgbench_fused"] = fused.to_json()


def _pgbench(bench: Bench, script: Path, *, label: str = "pgbench") -> Summary:
    """pgbench runs the captured claim and finish with the fleet's clients, until every loaded job is done."""
    fp, fc = bench.p.fleet
    socket_dir = connection.settings_dict["HOST"]
    pg = bench.repetitions(ceiling=label, clients=fp, batch=fc)
    key = f"ceiling:{label}"
    guess = bench.rates.get(key, bench.rates.get("ceiling:pgbench", 4000))
    for rep in range(bench.p.reps):
        n = bench.size(key, guess)
        per_client = math.ceil(n / (fc * fp))
        run = f"ceiling {label} {fp} clients batch {fc} rep {rep + 1}"
        drive = partial(
            ceiling_sql.run_pgbench,
            script,
            clients=fp,
            transactions=per_client + 5,
            socket_dir=socket_dir,
            database=connection.settings_dict["NAME"],
            log=bench.logs / f"{label.replace(' ', '-')}-{rep}.log",
        )
        rate = bench.run_throughput(bench.rq, None, "noop", n, run, drive=drive)
        bench.rates[key] = rate
        pg.values.append(rate)
        bench.say(f"  {run}: {rate:,.0f} jobs/s")
    return pg


def _bare(bench: Bench, statements: Path, processes: int) -> Summary:
    """`processes` bare psycopg processes, claim then finish, until every loaded job is done."""
    _, fc = bench.p.fleet
    bare = bench.repetitions(ceiling="bare psycopg", processes=processes, batch=fc)
    for rep in range(bench.p.reps):
        _bare_rep(bench, statements, processes, rep, bare)
    return bare


def _bare_rep(bench: Bench, statements: Path, processes: int, rep: int, into: Summary) -> float:
    _, fc = bench.p.fleet
    key = f"ceiling:bare:{processes}"
    n = bench.size(key, bench.rates.get(key, 2500))
    run = f"ceiling bare psycopg {processes} processes batch {fc} rep {rep + 1}"
    drive = partial(_run_bare, bench, statements, rep, processes)
    rate = bench.run_throughput(bench.rq, None, "noop", n, run, drive=drive)
    bench.rates[key] = rate
    into.values.append(rate)
    bench.say(f"  {run}: {rate:,.0f} jobs/s")
    return rate


def _paired_one(bench: Bench, statements: Path) -> tuple[Summary, Summary, list[float]]:
    """A worker of 1 x fc and the one-process bare loop, a repetition of each in turn: the worker's
    rate over the loop's, pair by pair. The shared machine's speed drifts over the minutes between
    the throughput scenario and this one; within a pair it barely moves. The worker is stopped
    while the loop runs, so that the loop meets no other client.

    The order alternates (worker first, then the loop first, ...): over a few minutes the machine's
    speed drifts one way more often than not, and a fixed order hands that drift to one side."""
    _, fc = bench.p.fleet
    worker = bench.repetitions(system="ReliableQ", job="noop", workers=f"1 x {fc}", run="paired with the bare loop")
    bare = bench.repetitions(ceiling="bare psycopg", processes=1, batch=fc, run=f"paired with ReliableQ 1 x {fc}")
    shares = []

    def worker_rep() -> None:
        bench.sweep(
            bench.rq, processes=1, concurrency=fc, job="noop", tag=f"pair-c{fc}", guess=600, reps=1, into=worker
        )

    for rep in range(bench.p.pairs or bench.p.reps):
        if rep % 2 == 0:
            worker_rep()
            rate = _bare_rep(bench, statements, 1, rep, bare)
        else:
            rate = _bare_rep(bench, statements, 1, rep, bare)
            worker_rep()
        shares.append(worker.values[-1] / rate)
        bench.say(f"  pair {rep + 1}: ReliableQ 1 x {fc} at {shares[-1]:.0%} of the bare loop")
    return worker, bare, shares


def _run_bare(bench: Bench, statements: Path, rep: int, processes: int) -> None:
    _, fc = bench.p.fleet
    start_at = time.time() + 1.0  # all processes connected before the first claim
    with Procs(bench.logs) as procs:
        for i in range(processes):
            argv = ceiling_sql.bare_argv(statements, batch=fc, worker_id=f"bare-{i}", start_at=start_at)
            procs.spawn(f"bare{processes}-{rep}-{i}", argv, env=env())
        for proc in procs.started:
            proc.wait(timeout=600)
            if proc.returncode:
                raise RuntimeError(f"bench.bare exited {proc.returncode}; see {bench.logs}")
