"""HTTP ingestion against the framework's ceilings, side by side, with a compiled client (wrk).

    python -m bench.http [--connections 1,4,16] [--seconds 5] [--reps 3] [--batch 1000] [--pooler]

One gunicorn (gthread, 2 workers x 8 threads, testproject with TESTPROJECT_BENCH_VIEWS=1) serves
four paths, measured in turn at each connection count, their order rotated every repetition:

- `noop`: a Django view that answers 202 and touches no database (the framework alone);
- `insert`: a Django view that makes the same INSERT as the API (services.submit), no login;
- `POST /v1/jobs`: the API (token, permission, throttle, validation, the job's document);
- `POST /v1/jobs/batch`: the API with --batch jobs per request.

Within a repetition the paths take turns second by second (--slices), so that load from elsewhere
on a shared machine falls on all of them alike; the ratio's range is that of the repetitions.
With --pooler a second gunicorn serves the same paths through PgBouncer in transaction mode
(Debian's, started as the tests start it, default_pool_size=--pool-size), taking its turns beside
the direct one, and a table gives each path's rate through the pooler as a fraction of direct.

Every answer counted must be a 2xx and every job counted a committed row (checked per run in
the database). wrk's CPU time is reported beside each figure: on a 2-core machine the client
shares the CPUs with the server and PostgreSQL. The server's CPU per request (gunicorn's process
tree and every PostgreSQL and PgBouncer process, read from /proc around each turn; the database's
share apart) is reported for the insert view and the API: a cost that time stolen by other
guests of the machine moves far less than it moves requests per second. Prints a Markdown table;
exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

from bench import pgbouncer, proccpu  # noqa: E402
from reliableq.models import Job  # noqa: E402
from reliableq.queue import db as queue_db  # noqa: E402
from testproject import accounts, dburl, processes  # noqa: E402

KIND = "demo.noop"
BENCH_KEY = secrets.token_hex(20)  # opens testproject's /bench/* views on this run's servers only
# wrk reports what it counted in one line the harness parses (requests, microseconds, errors, p50, p99).
DONE_LUA = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d\\n", summary.requests, summary.duration,
    e.status + e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(99), e.status))
end
"""


@dataclass
class Target:
    name: str
    url: str
    jobs_per_request: int  # 0: no job (the noop view)
    body: str
    headers: dict[str, str]


@dataclass
class Run:
    requests: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float
    client_cpu: float  # wrk's CPU seconds per wall second
    server_cpu: float = 0.0  # CPU seconds of gunicorn and the database processes during the run
    database_cpu: float = 0.0  # of which the database processes' (PostgreSQL, PgBouncer)

    def cpu_ms_per_request(self, part: float | None = None) -> float:
        return 1000 * (self.server_cpu if part is None else part) / max(1, self.requests - self.errors)

    def rate(self, jobs_per_request: int) -> float:
        return (self.requests - self.errors) * max(jobs_per_request, 1) / self.seconds


@dataclass
class Series:
    runs: list[Run] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)

    def median(self) -> float:
        return statistics.median(self.rates)

    def text(self) -> str:
        if len(self.rates) == 1:
            return f"{self.rates[0]:,.0f}"
        return f"{self.median():,.0f} ({min(self.rates):,.0f}-{max(self.rates):,.0f})"


def _delete_jobs(queue_prefix: str) -> int:
    """Delete the run's jobs (millions after a batch run) in three statements. The ORM's cascade
    fetched every id and deleted the dependent rows in chunks of ids: minutes for two million jobs."""
    jobs = Job._meta.db_table
    dependents = [(rel.related_model._meta.db_table, rel.field.column) for rel in Job._meta.related_objects]
    chosen = f"SELECT id FROM {jobs} WHERE queue LIKE %s"
    with queue_db.atomic(), queue_db.cursor() as cursor:
        for table, column in dependents:
            cursor.execute(f"DELETE FROM {table} WHERE {column} IN ({chosen})", [f"{queue_prefix}%"])
        cursor.execute(f"DELETE FROM {jobs} WHERE queue LIKE %s", [f"{queue_prefix}%"])
        return cursor.rowcount


def wrk(path: Target, *, connections: int, seconds: float, folder: Path, meter: proccpu.Meter | None = None) -> Run:
    script = folder / f"{uuid.uuid4().hex}.lua"
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(path.body)}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in path.headers.items()]
    script.write_text("\n".join(lines) + "\n" + DONE_LUA)
    threads = min(connections, 2)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    app_before, database_before = meter.read() if meter else (0.0, 0.0)
    began = time.monotonic()
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s", "--timeout", "10s",
         "-s", str(script), path.url],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.monotonic() - began
    app_after, database_after = meter.read() if meter else (0.0, 0.0)
    database_cpu = database_after - database_before
    server_cpu = app_after - app_before + database_cpu
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    requests, micros, errors, p50, p99, _ = (int(x) for x in line.split()[1:])
    return Run(requests=requests, seconds=micros / 1e6, errors=errors, p50_ms=p50 / 1000, p99_ms=p99 / 1000,
               client_cpu=cpu / wall, server_cpu=server_cpu, database_cpu=database_cpu)  # fmt: skip


def _settle(queue: str) -> int:
    """The queue's row count once it stops growing: requests wrk gave up on at the end still commit."""
    last = -1
    while True:
        count = Job.objects.filter(queue=queue).count()
        if count == last:
            return count
        last = count
        time.sleep(0.3)


def paths(base: str, token: str, queue: str, batch: int) -> list[Target]:
    job = {"kind": KIND, "payload": {}, "queue": queue}
    auth = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    opened = {"Content-Type": "application/json", "X-Bench-Key": BENCH_KEY}
    return [
        Target("noop view (no database)", f"{base}/bench/noop", 0, "{}", opened),
        Target("insert view (same INSERT, no login)", f"{base}/bench/insert", 1, json.dumps(job), opened),
        Target("POST /v1/jobs", f"{base}/v1/jobs", 1, json.dumps(job), auth),
        Target(f"POST /v1/jobs/batch ({batch} jobs)", f"{base}/v1/jobs/batch", batch,
              json.dumps({"jobs": [job] * batch}), auth),
    ]  # fmt: skip


@dataclass
class System:
    """One gunicorn serving the paths: connected to PostgreSQL directly, or through PgBouncer."""

    name: str
    base: str
    server: subprocess.Popen[bytes]


def _ratio_cell(top: Series, bottom: Series) -> str:
    """The ratio of the medians, and the range of the repetitions' own ratios (each pair ran side by side)."""
    pairs = [a / b for a, b in zip(top.rates, bottom.rates, strict=True) if b]
    cell = f"{top.median() / bottom.median():.0%}"
    return cell + (f" ({min(pairs):.0%}-{max(pairs):.0%})" if len(pairs) > 1 else "")


def _cpu_series(series: Series) -> Series:
    return Series(runs=series.runs, rates=[run.cpu_ms_per_request() for run in series.runs])


def _cpu_cell(series: Series) -> str:
    """Milliseconds of gunicorn and database CPU per request (median, range of the repetitions),
    and the database's share of the median repetition."""
    cpu = _cpu_series(series).rates
    middle = series.runs[cpu.index(statistics.median_low(cpu))]
    database = middle.cpu_ms_per_request(middle.database_cpu)
    return f"{statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) ms, database {database:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per path, repetition and count")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--slices", type=int, default=0,
        help="split each run into this many runs of about a second, the paths taking turns (default: one per second)",
    )  # fmt: skip
    parser.add_argument(
        "--pooler", action="store_true",
        help="also serve every path through PgBouncer (transaction mode) and measure it beside the direct server",
    )  # fmt: skip
    parser.add_argument("--pool-size", type=int, default=4, help="PgBouncer's default_pool_size with --pooler")
    args = parser.parse_args(argv)
    if not shutil.which("wrk"):
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    if args.pooler and not pgbouncer.available():
        print("pgbouncer is not installed (apt-get install pgbouncer)", file=sys.stderr)
        return 2
    counts = [int(c) for c in args.connections.split(",") if c.strip()]
    slices = args.slices or max(1, round(args.seconds))
    slice_seconds = max(1.0, args.seconds / slices)

    call_command("migrate", verbosity=0)
    run_id = uuid.uuid4().hex[:8]
    user = accounts.grant(User.objects.create_user(f"bench-http-{run_id}"), "reliableq.submit_job")
    token = Token.objects.create(user=user).key
    common = {
        "TESTPROJECT_BENCH_VIEWS": BENCH_KEY, "TESTPROJECT_SUBMIT_RATE": "1000000000/s",
        "RELIABLEQ_LOG_LEVEL": "WARNING",
        # The benchmark's own queue, and its backlog of millions, would pass the submitter's bounds.
        "RELIABLEQ_HTTP_QUEUES": '["*"]', "RELIABLEQ_MAX_PENDING_PER_SUBMITTER": "None",
    }  # fmt: skip
    results: dict[tuple[str, str, int], Series] = {}
    mismatches: list[str] = []
    pool_peak = 0
    folder = Path(tempfile.mkdtemp(prefix="bench-http-"))
    systems: list[System] = []
    bouncer: pgbouncer.PgBouncer | None = None
    meter: proccpu.Meter | None = None
    try:
        urls = [("direct", dburl.build(connection.settings_dict))]
        if args.pooler:
            pgbouncer.ensure_server_role(dburl.build(connection.settings_dict))
            bouncer = pgbouncer.PgBouncer.start(
                connection.settings_dict, pool_size=args.pool_size, server_user=pgbouncer.SERVER_ROLE
            )
            urls.append((f"PgBouncer (transaction, pool {args.pool_size})", bouncer.url))
        for name, url in urls:
            port = processes.free_port()
            log = (folder / f"gunicorn-{len(systems)}.log").open("wb")
            server = processes.start_api(port, env=processes.child_env(DATABASE_URL=url, **common), log=log,
                                         workers=args.workers, threads=args.threads)  # fmt: skip
            systems.append(System(name, f"http://127.0.0.1:{port}", server))
        for system in systems:
            processes.wait_http(f"{system.base}/v1/schema", timeout=60, process=system.server)
        meter = proccpu.Meter([system.server.pid for system in systems]) if proccpu.available() else None
        for c in counts:
            for rep in range(args.reps):
                # Each (system, path) writes a queue of its own, so that its rows can be counted at the end.
                def queue(s: int, p: int, tag: str = "") -> str:
                    return f"bench-http-{run_id}-{c}-{rep}-{s}-{p}{tag}"  # noqa: B023

                names = [t.name for t in paths("", "", "", args.batch)]
                order = list(range(len(names)))
                order = order[rep % len(order) :] + order[: rep % len(order)]  # rotate: no path always first
                turns = [(p, s) for p in order for s in range(len(systems))]
                for p, s in turns:  # warm connections and caches
                    warm = paths(systems[s].base, token, queue(s, p, "-warm"), args.batch)[p]
                    wrk(warm, connections=c, seconds=1, folder=folder)
                runs: dict[tuple[int, int], list[Run]] = {turn: [] for turn in turns}
                for _ in range(slices):
                    # The paths (and systems) take turns second by second: on a shared machine, load
                    # from elsewhere then falls on all of them alike, not on whichever ran at that moment.
                    for p, s in turns:
                        target = paths(systems[s].base, token, queue(s, p), args.batch)[p]
                        runs[(p, s)].append(
                            wrk(target, connections=c, seconds=slice_seconds, folder=folder, meter=meter)
                        )
                        if bouncer is not None and s == 1:
                            pool_peak = max(pool_peak, bouncer.server_connections())
                for (p, s), done in runs.items():
                    per = paths("", "", "", args.batch)[p].jobs_per_request
                    run = Run(
                        requests=sum(r.requests for r in done), seconds=sum(r.seconds for r in done),
                        errors=sum(r.errors for r in done), p50_ms=statistics.median(r.p50_ms for r in done),
                        p99_ms=max(r.p99_ms for r in done), client_cpu=statistics.mean(r.client_cpu for r in done),
                        server_cpu=sum(r.server_cpu for r in done), database_cpu=sum(r.database_cpu for r in done),
                    )  # fmt: skip
                    label = f"{names[p]}{'' if s == 0 else ' via ' + systems[s].name}"
                    made = _settle(queue(s, p)) if per else 0
                    # wrk counts requests that completed in its window; one in flight at the end of each
                    # slice may have committed too: allow at most one request per connection and slice.
                    expected = (run.requests - run.errors) * per
                    if per and not expected <= made <= expected + c * per * len(done):
                        mismatches.append(f"{label}, {c} connections: {expected} counted, {made} rows")
                    if run.errors:
                        mismatches.append(f"{label}, {c} connections: {run.errors} error answers")
                    series = results.setdefault((systems[s].name, names[p], c), Series())
                    series.runs.append(run)
                    series.rates.append(run.rate(per))
                    print(f"  {label:60} c={c:<3} rep {rep + 1}: {series.rates[-1]:10,.0f}/s  "
                          f"p99 {run.p99_ms:.1f} ms  server cpu {run.cpu_ms_per_request():.2f} ms/req  "
                          f"wrk cpu {run.client_cpu:.2f}", file=sys.stderr)  # fmt: skip
    finally:
        for system in systems:
            processes.stop(system.server)
        if bouncer is not None:
            bouncer.stop()
        deleted = _delete_jobs(f"bench-http-{run_id}")
        Token.objects.filter(user=user).delete()
        user.delete()
        shutil.rmtree(folder, ignore_errors=True)
        print(f"  cleaned up {deleted} rows, the user and the servers", file=sys.stderr)

    names = [p.name for p in paths("", "", "", args.batch)]
    api, insert = names[2], names[1]
    print()
    print(
        f"HTTP ingestion, {args.seconds:g} s per run in {slices} turns, {args.reps} repetitions (median, range), "
        f"gunicorn gthread {args.workers} x {args.threads}, wrk; {os.cpu_count()} cores shared by client, server "
        "and PostgreSQL"
    )
    for system in systems:
        print()
        if len(systems) > 1:
            print(f"**{system.name}**")
            print()
        print("| path | " + " | ".join(f"{c} conn. (requests or jobs/s)" for c in counts) + " |")
        print("| --- | " + " | ".join("---:" for _ in counts) + " |")
        for name in names:
            unit = "jobs" if "batch" in name else "req"
            cells = [f"{results[(system.name, name, c)].text()} {unit}/s" for c in counts]
            print(f"| {name} | " + " | ".join(cells) + " |")
        ratios = [_ratio_cell(results[(system.name, api, c)], results[(system.name, insert, c)]) for c in counts]
        print("| POST /v1/jobs / insert view (repetitions) | " + " | ".join(ratios) + " |")
        if meter is not None:
            for name in (insert, api):
                cells = [_cpu_cell(results[(system.name, name, c)]) for c in counts]
                print(f"| server CPU per request, {name} | " + " | ".join(cells) + " |")
            cells = [_ratio_cell(*(_cpu_series(results[(system.name, n, c)]) for n in (insert, api))) for c in counts]
            print("| insert view / POST /v1/jobs, server CPU per request | " + " | ".join(cells) + " |")
        print("| wrk CPU (s per s), API run | " + " | ".join(
            f"{statistics.median(r.client_cpu for r in results[(system.name, api, c)].runs):.2f}" for c in counts
        ) + " |")  # fmt: skip
    if len(systems) > 1:
        direct, pooled = systems[0].name, systems[1].name
        print()
        print(f"Through {pooled} / direct, the same path at the same moment (median, range of the repetitions); "
              f"PgBouncer held at most {pool_peak} server connections")  # fmt: skip
        print()
        print("| path | " + " | ".join(f"{c} conn." for c in counts) + " |")
        print("| --- | " + " | ".join("---:" for _ in counts) + " |")
        for name in names:
            cells = [_ratio_cell(results[(pooled, name, c)], results[(direct, name, c)]) for c in counts]
            print(f"| {name} | " + " | ".join(cells) + " |")
        if not 0 < pool_peak <= args.pool_size:
            mismatches.append(f"PgBouncer held {pool_peak} server connections (pool size {args.pool_size})")
    print()
    if mismatches:
        print("MISMATCH: " + "; ".join(mismatches))
        return 1
    print("Every counted answer was a 2xx and every counted job is a committed row.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
