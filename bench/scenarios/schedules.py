"""Schedules: what the maintenance leader's rounds cost one worker with many schedules, beside its claims."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from .. import statements
from ..core import Procs, percentile, wait_for
from ..systems import QUEUE, _one
from .context import Bench
from .helpers import Section, table
from .registry import scenario

SCHEDULED = "bench-scheduled"  # the schedules' jobs' queue; the worker serves it beside the offered load's
# The arms: cron expressions of the schedules, each one's offset spread over its period.
ARMS: dict[str, Any] = {
    "none": None,
    "hourly": lambda i, n: f"{i * 3600 // n % 60} {i * 3600 // n // 60} * * * *",  # evenly over the hour
    "every minute": lambda i, n: f"{i * 60 // n} * * * * *",  # evenly over the minute's seconds
}


@scenario(
    "schedules",
    title="Schedules: one worker with many, its statements and its claims",
    knobs=("reps", "schedule_count", "schedule_window", "latency_rate", "fleet"),
)
def schedules_cost(bench: Bench, s: Section) -> None:
    p = bench.p
    n, window, rate, fc = p.schedule_count, p.schedule_window, p.latency_rate, p.fleet[1]
    s.intro = (
        f"One worker (1 x {fc}, the maintenance leader) serving the queue of a steady load ({rate:g} no-op jobs/s, "
        f"one per transaction) and the queue of {n:,} schedules' jobs (no-ops), for {window:g} s per arm: no "
        f"schedule; {n:,} hourly ones (their slots spread over the hour: {n / 3600:.2f} due a second); {n:,} "
        f"every minute (spread over its seconds: {n / 60:.1f} due a second). The arms alternate, {p.reps} "
        "repetitions each. pg_stat_statements counts every statement the database ran in the window (the "
        "worker's and the load's), and the schedules' own (their table's: the round's look for the earliest "
        "slot, and the lock and update of the due ones); each claim's time is the worker's own log of it "
        "(reliableq.worker.claim); the start delay is each offered job's first start minus its created_at."
    )
    from django.db import transaction

    from reliableq.models import Schedule

    claims_log = bench.out / "schedules-claims.log"
    measured: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    try:
        with Procs(bench.logs) as procs:
            bench.rq.start_workers(
                procs, processes=1, concurrency=fc, tag="schedules", queue=f"{QUEUE},{SCHEDULED}",
                BENCH_CLAIM_LOG=str(claims_log),
            )  # fmt: skip
            bench.rq.warm_up(procs, fc)
            for rep in range(p.reps):
                order = list(ARMS) if rep % 2 == 0 else list(reversed(ARMS))
                for arm in order:
                    with transaction.atomic():
                        _replace_schedules(Schedule, ARMS[arm], n)
                    measured[arm].append(_window(bench, procs, arm, rep, claims_log))
    finally:
        Schedule.objects.all().delete()  # no later scenario's workers serve them
        bench.rq.reset()

    def med(arm: str, key: str) -> float:
        values = sorted(m[key] for m in measured[arm])
        return values[len(values) // 2]

    def span(arm: str, key: str, fmt: str) -> str:
        values = [m[key] for m in measured[arm]]
        text = format(med(arm, key), fmt)
        return text if len(values) < 2 else f"{text} ({format(min(values), fmt)}–{format(max(values), fmt)})"

    rows = [
        [
            arm if arm == "none" else f"{n:,} {arm}",
            span(arm, "statements_per_s", ".1f"),
            span(arm, "schedule_statements_per_s", ".2f"),
            span(arm, "scheduled_jobs_per_s", ".1f"),
            span(arm, "claim_p50_ms", ".2f"),
            span(arm, "claim_p99_ms", ".2f"),
            span(arm, "start_p99_ms", ".1f"),
        ]
        for arm in ARMS
    ]
    header = ["schedules", "statements/s (all)", "schedule statements/s", "their jobs/s", "claim p50 ms",
              "claim p99 ms", "start delay p99 ms"]  # fmt: skip
    s.tables.append(table(header, rows))
    extra = {arm: med(arm, "statements_per_s") - med("none", "statements_per_s") for arm in ARMS if arm != "none"}
    s.notes.append(
        "Medians, each repetition's range in brackets. Statements beyond the no-schedule arm's: "
        + "; ".join(f"{n:,} {arm}: {extra[arm]:+.1f}/s" for arm in extra)
        + ". The schedules' jobs cost what any job costs (its INSERT in the round's transaction, its claim, its "
        "finish); the round adds a BEGIN and a COMMIT and its statements on the schedule table."
    )
    s.data = {"schedules": n, "window_seconds": window, "rate": rate, "by_arm": measured, "extra_per_s": extra}
    bench.results["schedules"] = {arm: {k: med(arm, k) for k in measured[arm][0]} for arm in ARMS}


def _replace_schedules(model: Any, cron: Any, n: int) -> None:
    """The arm's schedules, each with its first slot after now (as an operator's save would set it)."""
    from reliableq import schedules

    model.objects.all().delete()
    if cron is None:
        return
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for i in range(n):
        row = model(name=f"bench-{i:05d}", kind="bench.noop", cron=cron(i, n), queue=SCHEDULED)
        row.next_slot = schedules.first_slot(row, now)
        rows.append(row)
    model.objects.bulk_create(rows, batch_size=1000)


def _window(bench: Bench, procs: Procs, arm: str, rep: int, claims_log: Path) -> dict[str, Any]:
    """Offer the steady load for the window while pg_stat_statements counts; gate; the window's figures."""
    p = bench.p
    run = f"schedules {arm} rep {rep + 1}"
    if ARMS[arm] is not None:  # the leader has seen the new rows: some slot made a job
        wait_for(lambda: _one("SELECT count(*) FROM reliableq_job WHERE queue = %s", [SCHEDULED])[0] > 0,
                 timeout=120, interval=0.1, what=f"{run}: the leader's first round", procs=procs)  # fmt: skip
    bench.rq.reset()
    offset = claims_log.stat().st_size if claims_log.exists() else 0
    with statements.tracking(bench.database_url):
        statements.reset(bench.database_url)
        began, wall_began = time.monotonic(), time.time()
        made = 0
        while time.monotonic() - began < p.schedule_window:
            due = began + made / p.latency_rate - time.monotonic()
            if due > 0:
                time.sleep(due)
            bench.rq.enqueue("noop")
            made += 1
            procs.check_alive()
        seconds = time.monotonic() - began
        total, on_schedule = _statement_calls(bench.database_url)
    wait_for(lambda: _offered_unfinished() == 0, timeout=120, interval=0.05, what=f"{run}: the load to finish",
             procs=procs)  # fmt: skip
    offered = bench.rq.outcome(f"j.queue = '{QUEUE}'")
    bench.gate_outcome(run, offered, n=made, attempts=made)
    delays = [float(d) for (d,) in _start_delays()]
    bench.gate.check(run, f"a start delay for every offered job ({len(delays)})", len(delays) == made)
    scheduled = int(_one(f"SELECT count(*) FROM reliableq_job WHERE queue = '{SCHEDULED}'")[0])
    claims = [ms for at, ms in _claims_since(claims_log, offset) if wall_began <= at <= wall_began + seconds]
    figures = {
        "statements_per_s": total / seconds,
        "schedule_statements_per_s": on_schedule / seconds,
        "scheduled_jobs_per_s": scheduled / seconds,
        "claim_p50_ms": percentile(claims, 50),
        "claim_p99_ms": percentile(claims, 99),
        "claims": len(claims),
        "start_p99_ms": 1000 * percentile(delays, 99),
    }
    bench.say(
        f"  {run}: {figures['statements_per_s']:.1f} statements/s ({figures['schedule_statements_per_s']:.2f} on "
        f"schedules), {figures['scheduled_jobs_per_s']:.1f} scheduled jobs/s, claim p99 "
        f"{figures['claim_p99_ms']:.2f} ms, start delay p99 {figures['start_p99_ms']:.1f} ms"
    )
    return figures


def _statement_calls(url: str) -> tuple[int, int]:
    """Calls of every statement since the reset, and of the schedules' own, in the bench database."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(calls) FILTER (WHERE query LIKE '%reliableq_schedule%'), 0)"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _offered_unfinished() -> int:
    return int(
        _one(f"SELECT count(*) FROM reliableq_job WHERE queue = '{QUEUE}' AND status IN ('PENDING', 'RUNNING')")[0]
    )


def _start_delays() -> list[tuple[Any, ...]]:
    from ..systems import _all

    return _all(
        f"""
        SELECT extract(epoch FROM a.started_at - j.created_at)
          FROM reliableq_job j JOIN reliableq_attempt a ON a.job_id = j.id AND a.number = 1
         WHERE j.queue = '{QUEUE}'
        """
    )


def _claims_since(path: Path, offset: int) -> list[tuple[float, float]]:
    """(epoch seconds, ms) of each claim the worker logged after `offset` bytes of its log."""
    out = []
    with path.open() as log:
        log.seek(offset)
        for line in log:
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "claim":
                out.append((float(parts[0]), float(parts[2])))
    return out
