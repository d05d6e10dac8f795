"""HTTP ingestion against the framework's ceilings, side by side, with a compiled client (wrk).

    python -m bench.http [--connections 1,4,16] [--seconds 5] [--reps 3] [--batch 1000]

One gunicorn (gthread, 2 workers x 8 threads, testproject with TESTPROJECT_BENCH_VIEWS=1) serves
four paths, measured in turn at each connection count, their order rotated every repetition:

- `noop`: a Django view that answers 202 and touches no database (the framework alone);
- `insert`: a Django view that makes the same INSERT as the API (services.submit), no login;
- `POST /v1/jobs`: the API (token, permission, throttle, validation, the job's document);
- `POST /v1/jobs/batch`: the API with --batch jobs per request.

Every answer counted must be a 2xx and every job counted a committed row (checked per run in
the database). wrk's CPU time is reported beside each figure: on a 2-core machine the client
shares the CPUs with the server and PostgreSQL. Prints a Markdown table; exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

from reliableq.models import Job  # noqa: E402
from testproject import accounts, dburl, processes  # noqa: E402

KIND = "demo.noop"
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


def wrk(path: Target, *, connections: int, seconds: float, folder: Path) -> Run:
    script = folder / f"{uuid.uuid4().hex}.lua"
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(path.body)}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in path.headers.items()]
    script.write_text("\n".join(lines) + "\n" + DONE_LUA)
    threads = min(connections, 2)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s", "--timeout", "10s",
         "-s", str(script), path.url],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    requests, micros, errors, p50, p99, _ = (int(x) for x in line.split()[1:])
    return Run(requests=requests, seconds=micros / 1e6, errors=errors, p50_ms=p50 / 1000, p99_ms=p99 / 1000,
               client_cpu=cpu / wall)  # fmt: skip


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
    return [
        Target("noop view (no database)", f"{base}/bench/noop", 0, "{}", {"Content-Type": "application/json"}),
        Target("insert view (same INSERT, no login)", f"{base}/bench/insert", 1, json.dumps(job),
              {"Content-Type": "application/json"}),
        Target("POST /v1/jobs", f"{base}/v1/jobs", 1, json.dumps(job), auth),
        Target(f"POST /v1/jobs/batch ({batch} jobs)", f"{base}/v1/jobs/batch", batch,
              json.dumps({"jobs": [job] * batch}), auth),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    if not shutil.which("wrk"):
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    counts = [int(c) for c in args.connections.split(",") if c.strip()]

    call_command("migrate", verbosity=0)
    run_id = uuid.uuid4().hex[:8]
    user = accounts.grant(User.objects.create_user(f"bench-http-{run_id}"), "reliableq.submit_job")
    token = Token.objects.create(user=user).key
    port = processes.free_port()
    env = processes.child_env(
        DATABASE_URL=dburl.build(connection.settings_dict), TESTPROJECT_BENCH_VIEWS="1",
        TESTPROJECT_SUBMIT_RATE="1000000/s", RELIABLEQ_LOG_LEVEL="WARNING",
    )  # fmt: skip
    results: dict[tuple[str, int], Series] = {}
    mismatches: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="bench-http-"))
    server = processes.start_api(port, env=env, log=(folder / "gunicorn.log").open("wb"), workers=args.workers,
                                 threads=args.threads)  # fmt: skip
    try:
        processes.wait_http(f"http://127.0.0.1:{port}/v1/schema", timeout=60, process=server)
        for c in counts:
            for rep in range(args.reps):
                queue = f"bench-http-{run_id}-{c}-{rep}"
                order = paths(f"http://127.0.0.1:{port}", token, queue, args.batch)
                order = order[rep % len(order) :] + order[: rep % len(order)]  # rotate: no path always first
                warmups = paths(f"http://127.0.0.1:{port}", token, f"{queue}-warm", args.batch)
                for path in order:
                    warm = next(w for w in warmups if w.name == path.name)
                    wrk(warm, connections=c, seconds=1, folder=folder)  # warm connections and caches
                    _settle(queue)
                    before = Job.objects.filter(queue=queue).count()
                    run = wrk(path, connections=c, seconds=args.seconds, folder=folder)
                    made = _settle(queue) - before
                    # wrk counts requests that completed in its window; one in flight at the end may
                    # have committed too: allow at most one request per connection of slack.
                    expected = (run.requests - run.errors) * path.jobs_per_request
                    if path.jobs_per_request and not expected <= made <= expected + c * path.jobs_per_request:
                        mismatches.append(f"{path.name}, {c} connections: {expected} counted, {made} rows")
                    if run.errors:
                        mismatches.append(f"{path.name}, {c} connections: {run.errors} error answers")
                    series = results.setdefault((path.name, c), Series())
                    series.runs.append(run)
                    series.rates.append(run.rate(path.jobs_per_request))
                    print(f"  {path.name:40} c={c:<3} rep {rep + 1}: {series.rates[-1]:10,.0f}/s  "
                          f"p99 {run.p99_ms:.1f} ms  wrk cpu {run.client_cpu:.2f}", file=sys.stderr)  # fmt: skip
    finally:
        processes.stop(server)
        deleted, _ = Job.objects.filter(queue__startswith=f"bench-http-{run_id}").delete()
        Token.objects.filter(user=user).delete()
        user.delete()
        shutil.rmtree(folder, ignore_errors=True)
        print(f"  cleaned up {deleted} rows, the user and the server", file=sys.stderr)

    names = [p.name for p in paths("", "", "", args.batch)]
    print()
    print(
        f"HTTP ingestion, {args.seconds:g} s per run, {args.reps} repetitions (median, range), gunicorn gthread "
        f"{args.workers} x {args.threads}, wrk; {os.cpu_count()} cores shared by client, server and PostgreSQL"
    )
    print()
    print("| path | " + " | ".join(f"{c} conn. (requests or jobs/s)" for c in counts) + " |")
    print("| --- | " + " | ".join("---:" for _ in counts) + " |")
    for name in names:
        unit = "jobs" if "batch" in name else "req"
        cells = [f"{results[(name, c)].text()} {unit}/s" for c in counts]
        print(f"| {name} | " + " | ".join(cells) + " |")
    api, insert = names[2], names[1]
    print("| POST /v1/jobs / insert view | " + " | ".join(
        f"{results[(api, c)].median() / results[(insert, c)].median():.0%}" for c in counts) + " |")  # fmt: skip
    print("| wrk CPU (s per s), API run | " + " | ".join(
        f"{statistics.median(r.client_cpu for r in results[(api, c)].runs):.2f}" for c in counts) + " |")  # fmt: skip
    print()
    if mismatches:
        print("MISMATCH: " + "; ".join(mismatches))
        return 1
    print("Every counted answer was a 2xx and every counted job is a committed row.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
