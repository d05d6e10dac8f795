"""Soak: a long steady run at half the fleet's maximum, with retention on; throughput, sizes and WAL over time."""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

from .. import walstats
from ..core import Procs, wait_for
from ..systems import _one
from .context import Bench
from .helpers import Section, table
from .registry import scenario
from .steady import Enqueuer

SIZES = """
    SELECT pg_relation_size('reliableq_job'), pg_indexes_size('reliableq_job'),
           pg_relation_size('reliableq_attempt'), pg_indexes_size('reliableq_attempt'),
           pg_current_wal_lsn()::text
"""
MB = 1024 * 1024


@scenario(
    "soak",
    title="Soak: half the maximum for a long run, with retention",
    knobs=("soak_seconds", "soak_sample", "soak_retention", "fleet", "seconds"),
)
def soak(bench: Bench, s: Section) -> None:
    p = bench.p
    fp, fc = p.fleet
    tag = "soak"
    bench.say(f"soak: the fleet's maximum first ({fp} x {fc}, one run)")
    most = bench.sweep(bench.rq, processes=fp, concurrency=fc, job="noop", tag="soak-max", guess=2000, reps=1).median
    rate = round(most / 2)
    edge = max(p.soak_sample, min(300.0, p.soak_seconds / 5))
    s.intro = (
        f"{fp} x {fc} workers; their maximum measured first ({most:,.0f} no-op jobs/s, one run), then a steady "
        f"enqueuer offers half of it ({rate:,} jobs/s) for {p.soak_seconds:g} s, while the maintenance leader deletes "
        f"SUCCEEDED jobs older than {p.soak_retention:g} s (RETENTION_SECONDS, a round every second). Every "
        f"{p.soak_sample:g} s: jobs completed, the job and attempt tables' heap and index sizes, and WAL written "
        f"(pg_current_wal_lsn). Goal: the last {edge:g} s at >= 90% of the first {edge:g} s, sizes that stop "
        "growing once retention starts deleting, WAL per job <= 1.5 KB."
    )
    bench.rq.reset()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE reliableq_job")
        cursor.execute("CHECKPOINT")
    rows: list[dict[str, Any]] = []
    with Procs(bench.logs) as procs:
        bench.rq.start_workers(
            procs,
            processes=fp,
            concurrency=fc,
            tag=tag,
            RELIABLEQ_RETENTION_SECONDS=f'{{"SUCCEEDED": {p.soak_retention:g}}}',
            RELIABLEQ_RETENTION_INTERVAL_SECONDS="1",
        )
        bench.rq.warm_up(procs, fp * fc)
        enqueuer = Enqueuer(rate, p.soak_seconds)
        began = time.time()
        last, completed = began, 0
        start_lsn = _one("SELECT pg_current_wal_lsn()::text")[0]
        sampled = [start_lsn]  # the LSN at every sample
        enqueuer.start(began)
        try:
            while (now := time.time()) < began + p.soak_seconds:
                time.sleep(max(0.0, p.soak_sample - (now - last)))
                now = time.time()
                # finished_at is its transaction's start: count up to a second ago, when all of those committed.
                done = _one(
                    "SELECT count(*) FROM reliableq_job WHERE finished_at >= to_timestamp(%s) - interval '1 s'"
                    " AND finished_at < to_timestamp(%s) - interval '1 s'",
                    [last, now],
                )[0]
                job, job_idx, attempt, attempt_idx, lsn = _one(SIZES)
                wal = _one("SELECT pg_wal_lsn_diff(%s, %s)", [lsn, start_lsn])[0]
                completed += done
                sampled.append(lsn)
                rows.append(
                    {
                        "at": now - began,
                        "seconds": now - last,
                        "enqueued": enqueuer.count,
                        "completed": completed,
                        "rate": done / (now - last),
                        "job_mb": job / MB,
                        "job_indexes_mb": job_idx / MB,
                        "attempt_mb": attempt / MB,
                        "attempt_indexes_mb": attempt_idx / MB,
                        "wal_bytes": float(wal),
                    }
                )
                last = now
                if len(rows) % max(1, round(60 / p.soak_sample)) == 0:  # a progress line a minute
                    bench.say(
                        f"  soak {rows[-1]['at']:.0f} s: {rows[-1]['rate']:,.0f} jobs/s, "
                        f"{sum(v for k, v in rows[-1].items() if k.endswith('mb')):.1f} MB, "
                        f"WAL {rows[-1]['wal_bytes'] / max(1, completed):,.0f} bytes/job"
                    )
                procs.check_alive()
        finally:
            enqueuer.stop()
        # The last sample's stretch of WAL, read at once (before a checkpoint can recycle it).
        parts = walstats.breakdown(bench.database_url, sampled[-2], sampled[-1]) if len(sampled) > 1 else None
        wait_for(lambda: bench.rq.unfinished() == 0, timeout=120, interval=0.5, what="soak to drain", procs=procs)
        tail = _one(
            "SELECT count(*) FROM reliableq_job WHERE finished_at >= to_timestamp(%s) - interval '1 s'",
            [last],
        )[0]
        end_lsn = _one("SELECT pg_current_wal_lsn()::text")[0]
        wal_total = float(_one("SELECT pg_wal_lsn_diff(%s, %s)", [end_lsn, start_lsn])[0])
    enqueued = enqueuer.count
    finished = completed + tail
    bench.gate.check(tag, f"every job enqueued finished ({finished} of {enqueued})", finished == enqueued)
    bench.gate.check(tag, "no job failed", _one("SELECT count(*) FROM reliableq_job WHERE status = 'DEAD'")[0] == 0)
    bench.gate.check(tag, f"the enqueuer kept its rate ({enqueued} of {int(rate * p.soak_seconds)})",
                     enqueued >= 0.97 * rate * p.soak_seconds)  # fmt: skip
    k = max(1, round(edge / p.soak_sample))  # samples in each edge window
    first, final = _rate(rows[:k]), _rate(rows[-k:])
    per_job = wal_total / max(1, finished)
    sizes = [r["job_mb"] + r["job_indexes_mb"] + r["attempt_mb"] + r["attempt_indexes_mb"] for r in rows]
    half = len(sizes) // 2
    growth = (max(sizes[half:]) - max(sizes[:half])) if half else float("nan")
    s.tables.append(
        table(
            [
                "offered jobs/s",
                f"first {edge:g} s jobs/s",
                f"last {edge:g} s jobs/s",
                "last / first",
                "WAL bytes per job",
                "tables + indexes MB, peak of first half / of second half",
            ],
            [
                [
                    f"{rate:,}",
                    f"{first:,.0f}",
                    f"{final:,.0f}",
                    f"{final / first:.2f}" if first else "n/a",
                    f"{per_job:,.0f}",
                    f"{max(sizes[:half] or [0]):.1f} / {max(sizes[half:] or [0]):.1f}",
                ]
            ],
        )
    )
    step = max(1, round(60 / p.soak_sample)) if p.soak_seconds >= 600 else 1
    s.notes.append(
        "Over time:\n\n"
        + table(
            ["s", "completed jobs/s", "job MB (indexes)", "attempt MB (indexes)", "WAL MB"],
            [
                [
                    f"{r['at']:.0f}",
                    f"{r['rate']:,.0f}",
                    f"{r['job_mb']:.1f} ({r['job_indexes_mb']:.1f})",
                    f"{r['attempt_mb']:.1f} ({r['attempt_indexes_mb']:.1f})",
                    f"{r['wal_bytes'] / MB:,.0f}",
                ]
                for r in rows[step - 1 :: step]
            ],
        )
    )
    if parts is not None:
        jobs = rows[-1]["rate"] * rows[-1]["seconds"]
        s.notes.append(_wal_note(parts, jobs, rows[-1]["at"] - rows[-1]["seconds"], rows[-1]["at"]))
    else:
        s.notes.append("The WAL of the last sample was recycled before it could be read: no breakdown this run.")
    s.data = {
        "maximum": most,
        "offered": rate,
        "first": first,
        "last": final,
        "wal_bytes_per_job": per_job,
        "wal_lsn": [start_lsn, end_lsn],
        "wal_breakdown": [vars(part) for part in parts or []],
        "size_growth_mb": growth,
        "samples": rows,
    }
    bench.results["soak"] = s.data
    bench.say(
        f"  soak: {rate:,} jobs/s offered; first {edge:g} s {first:,.0f}/s, last {final:,.0f}/s; "
        f"WAL {per_job:,.0f} bytes/job; sizes {max(sizes[:half] or [0]):.1f} -> {max(sizes[half:] or [0]):.1f} MB"
    )
    from .. import report

    s.plots.append(report.plot_soak(bench.out, rows))


def _rate(rows: list[dict[str, Any]]) -> float:
    seconds = sum(r["seconds"] for r in rows)
    return sum(r["rate"] * r["seconds"] for r in rows) / seconds if seconds else float("nan")


def _wal_note(parts: list[walstats.Part], jobs: float, start: float, end: float) -> str:
    """Bytes per job of the last sample's WAL: by relation, then by record type."""
    jobs = max(1.0, jobs)
    total = sum(p.bytes + p.fpi_bytes for p in parts)
    relations = [
        [
            name,
            f"{records / jobs:.2f}",
            f"{(size + fpi) / jobs:,.0f}",
            f"{fpi / jobs:,.0f}",
            f"{100 * (size + fpi) / total:.0f}%",
        ]
        for name, records, size, fpi in walstats.grouped(parts)
    ]
    types = [
        [kind, f"{records / jobs:.2f}", f"{(size + fpi) / jobs:,.0f}", f"{100 * (size + fpi) / total:.0f}%"]
        for kind, records, size, fpi in walstats.grouped(parts, by="kind")[:12]
    ]
    return (
        f"Where the WAL went, from {start:.0f} to {end:.0f} s ({total / jobs:,.0f} bytes for each of the "
        f"{jobs:,.0f} jobs completed then; pg_walinspect, a record counted to the relation of its first block):\n\n"
        + table(["relation", "records per job", "bytes per job", "of which full pages", "share"], relations)
        + "\n\nBy record type (the largest twelve):\n\n"
        + table(["record", "records per job", "bytes per job", "share"], types)
    )
