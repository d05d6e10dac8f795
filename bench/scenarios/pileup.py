"""Claim cost as finished jobs pile up: the fleet's no-op rate over 0 to 1M finished rows, and the take's plan."""

from __future__ import annotations

import time

from django.db import transaction

from .. import ceilings as ceiling_sql  # captures the take statement the worker sends
from .. import statements
from ..core import Procs, Summary, ratio, wait_for
from ..systems import QUEUE, ReliableQ, _all, _exec, _one
from .context import Bench
from .helpers import Section, fmt_pct, table
from .registry import scenario


@scenario(
    "pileup",
    title="Claim cost as finished jobs pile up",
    knobs=("reps", "min_jobs", "pileup", "pileup_seconds", "fleet"),
)
def pileup(bench: Bench, s: Section) -> None:
    p = bench.p
    fp, fc = p.fleet
    s.intro = (
        f"The same no-op run ({fp} x {fc}) on a table that also holds 0 to "
        f"{max(p.pileup):,} finished jobs (SUCCEEDED, each with its attempt row; bulk-inserted, "
        "then VACUUM ANALYZE and a CHECKPOINT, so that the bulk load's upkeep is not charged to the claims). "
        "Every repetition, at every level, starts after its own VACUUM ANALYZE and CHECKPOINT: without them each "
        "level inherited the dead versions of the repetitions before it (about 80,000 per repetition) and ran "
        "slower from one repetition to the next, which the ratios then charged to the finished rows. "
        "The claim's plan is EXPLAIN (ANALYZE, BUFFERS) of the take "
        "statement the worker sends, captured from `reliableq.queue`, over 200 due jobs, rolled back."
    )
    bench.rq.reset()
    rates: dict[int, Summary] = {}
    plans: dict[int, str] = {}
    filled = 0
    seen_in: dict[int, list[str]] = {}
    with statements.tracking(bench.database_url), Procs(bench.logs) as procs:
        bench.rq.start_workers(procs, processes=fp, concurrency=fc, tag="pile")
        bench.rq.warm_up(procs, fp * fc)
        for level in p.pileup:
            if level > filled:
                t0 = time.monotonic()
                _fill_finished(level - filled)
                filled = level
                bench.say(
                    f"pileup: {filled:,} finished rows ({time.monotonic() - t0:.1f} s to insert, vacuum and checkpoint)"
                )
            plans[level] = _claim_plan(fc)
            rates[level] = bench.repetitions(finished_rows=level, workers=f"{fp} x {fc}")
            for rep in range(p.reps):
                key = "pile"
                n = bench.size(key, bench.rates.get(f"reliableq:noop:{fp}x{fc}", 800), p.pileup_seconds)
                run = f"pileup {level:,} finished rows rep {rep + 1}"
                rate, seen = _pile_run(bench, procs, n, run, filled)
                bench.rates[key] = rate
                rates[level].values.append(rate)
                seen_in.setdefault(level, []).append(seen)
                bench.say(f"  {run}: {rate:,.0f} jobs/s, {n:,} jobs; {seen}")
    bench.rq.reset()
    base = rates[p.pileup[0]].median
    rows = [
        [
            f"{level:,}",
            rates[level].text(),
            fmt_pct(ratio(rates[level].median, base)),
            _plan_time(plans[level]),
            "<br>".join(seen_in[level]),
        ]
        for level in p.pileup
    ]
    s.tables.append(
        table(
            [
                "finished rows",
                "jobs/s",
                "of the empty table",
                "take statement, EXPLAIN ANALYZE ms",
                "each repetition's claims and finishes (pg_stat_statements); analyzes during it",
            ],
            rows,
        )
    )
    top = max(p.pileup)
    s.notes.append(f"The take statement's plan at {top:,} finished rows:\n\n```\n{plans[top]}\n```")
    # Summaries, not medians: the targets quote each level's ratio with the range over every pair of repetitions.
    bench.results["pileup"] = dict(rates)
    s.data = {"rates": {k: v.to_json() for k, v in rates.items()}, "plans": plans}
    from .. import report

    s.plots.append(report.plot_pileup(bench.out, rates))


def _pile_run(bench: Bench, procs: Procs, n: int, run: str, filled: int) -> tuple[float, str]:
    """One no-op run beside the finished rows, which must come through untouched.

    Returns jobs/s and what its claims and finishes cost: their mean time and the buffers each
    touched (a plan that walks a table shows here first), and the analyzes of the job and attempt
    tables during the run, autovacuum's and the guard's (each replaces the plans workers cached)."""
    _exec("DELETE FROM reliableq_attempt WHERE job_id IN (SELECT id FROM reliableq_job WHERE kind = 'bench.noop')")
    _exec("DELETE FROM reliableq_job WHERE kind = 'bench.noop'")
    _settle()
    statements.reset(bench.database_url)
    analyzed = _analyzes()
    began = time.monotonic()
    bench.rq.load(n, "noop")
    wait_for(lambda: bench.rq.unfinished() == 0, timeout=max(60.0, n / 20), interval=0.05, what=run, procs=procs)
    wall = time.monotonic() - began
    o = bench.rq.outcome("j.kind = 'bench.noop'")
    bench.gate_outcome(run, o, n=n, attempts=n)
    kept = _one("SELECT count(*) FROM reliableq_job WHERE kind = 'bench.filler' AND status = 'SUCCEEDED'")[0]
    bench.gate.check(run, f"the {filled:,} finished rows untouched", kept == filled)
    bench.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
    hot = statements.hot_cost(bench.database_url)
    auto, manual = (now - then for now, then in zip(_analyzes(), analyzed, strict=True))
    seen = "; ".join(
        f"{calls:,} {name}, {mean_ms:.2f} ms and {buffers:,.0f} buffers each"
        for name, (calls, mean_ms, buffers) in hot.items()
    )
    seen += f"; analyzes {auto} by autovacuum, {manual} by the guard"
    return n / o.span, seen


def _analyzes() -> tuple[int, int]:
    """(autovacuum's analyzes, everyone else's) of the job and attempt tables so far."""
    auto, manual = _one(
        "SELECT sum(autoanalyze_count), sum(analyze_count) FROM pg_stat_user_tables"
        " WHERE relname IN ('reliableq_job', 'reliableq_attempt')"
    )
    return int(auto), int(manual)


def _fill_finished(count: int) -> None:
    """Bulk-insert finished jobs with one attempt each (generate_series: ~1M rows in seconds, not hours)."""
    step = 250_000
    for start in range(0, count, step):
        n = min(step, count - start)
        with transaction.atomic():
            _exec(
                """
                WITH made AS (
                    INSERT INTO reliableq_job (id, kind, queue, priority, payload, status, attempts, max_attempts,
                                               run_at, worker_id, last_error, created_at, updated_at, finished_at)
                    SELECT gen_random_uuid(), 'bench.filler', %s, 0, '{}', 'SUCCEEDED', 1, 5,
                           now() - interval '1 hour', 'filler', '', now() - interval '1 hour', now(), now()
                      FROM generate_series(1, %s)
                    RETURNING id
                )
                INSERT INTO reliableq_attempt (job_id, number, worker_id, lease_token, started_at, finished_at,
                                               outcome, error)
                SELECT id, 1, 'filler', gen_random_uuid(), now() - interval '1 hour', now(), 'SUCCEEDED', '' FROM made
                """,
                [QUEUE, n],
            )
    _settle()


def _settle() -> None:
    """The same start for every repetition: no dead versions left, fresh statistics, a checkpoint just taken."""
    _exec("VACUUM ANALYZE reliableq_job")
    _exec("VACUUM ANALYZE reliableq_attempt")
    _exec("CHECKPOINT")


def _claim_plan(batch: int) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the worker's take statement over 200 due jobs, all rolled back."""
    spec = ceiling_sql.capture(QUEUE + "-explain")
    take_sql, take_params = spec["claim"][-1]
    take_sql = take_sql.replace(f"LIMIT {spec['limit']}", f"LIMIT {batch}")
    take_params = [QUEUE if p == QUEUE + "-explain" else p for p in take_params]

    class Rollback(Exception):
        pass

    lines: list[str] = []
    try:
        with transaction.atomic():
            ReliableQ().load(200, "noop")
            lines = [r[0] for r in _all("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + take_sql, take_params)]
            raise Rollback
    except Rollback:
        pass
    return "\n".join(lines)


def _plan_time(plan: str) -> str:
    for line in plan.splitlines():
        if line.strip().startswith("Execution Time:"):
            return line.split(":", 1)[1].strip().removesuffix(" ms")
    return "?"
