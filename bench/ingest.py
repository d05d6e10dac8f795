"""Ingestion benchmark: committed job submissions per second.

    python -m bench.ingest [--clients 1,4,16] [--seconds 5] [--workers N] [--threads 8]

Two paths into the queue, each measured as jobs whose INSERT has committed:

- HTTP: POST /v1/jobs through a real gunicorn (gthread) that this script starts, from N client
  threads, each on its own keep-alive connection (http.client). Every 202 is a committed job.
- Python: `reliableq.enqueue`, one job per transaction, in this one process.

The database is the configured one: DATABASE_URL, or the checkout's embedded PostgreSQL 18.
Each run writes to queues of its own (bench-<random>-...), checks that the rows in the
database match the submissions it counted, then deletes its jobs, its user and its token and
stops its server. It prints a Markdown table.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

import reliableq  # noqa: E402
from reliableq.models import Job  # noqa: E402
from testproject import accounts, dburl, processes  # noqa: E402

KIND = "demo.noop"


@dataclass
class Result:
    path: str
    clients: int
    jobs: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> str:
        if not self.latencies_ms:
            return "-"
        ordered = sorted(self.latencies_ms)
        return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


class Client:
    """One keep-alive connection to the server; reconnects if the server closed it."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection(host, port, timeout=30)

    def submit(self, queue: str, n: int) -> int:
        body = json.dumps({"kind": KIND, "payload": {"n": n}, "queue": queue})
        for attempt in (1, 2):
            try:
                self.conn.request("POST", "/v1/jobs", body=body, headers=self.headers)
                response = self.conn.getresponse()
                response.read()
                return response.status
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # Keep-alive connection closed by the server between requests: nothing was sent
                # that it read, so sending again cannot make a second job.
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def http_run(host: str, port: int, token: str, *, clients: int, seconds: float, queue: str) -> Result:
    """`clients` threads submit as fast as they can for `seconds`; count the 202s."""
    result = Result("HTTP POST /v1/jobs", clients, 0, 0.0)
    lock = threading.Lock()
    connected = threading.Barrier(clients + 1)
    go = threading.Event()
    stop_at = [0.0]

    def client_loop(i: int) -> None:
        client = Client(host, port, token)
        accepted, errors, latencies = 0, 0, []
        try:
            client.submit(queue + "-warmup", -1)  # open the connection before the clock starts
            connected.wait()
            go.wait()
            n = 0
            while time.monotonic() < stop_at[0]:
                t0 = time.perf_counter()
                status = client.submit(queue, i * 10_000_000 + n)
                latencies.append((time.perf_counter() - t0) * 1000)
                n += 1
                if status == 202:
                    accepted += 1
                else:
                    errors += 1
        finally:
            client.close()
            with lock:
                result.jobs += accepted
                result.errors += errors
                result.latencies_ms += latencies

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    connected.wait()
    began = time.monotonic()
    stop_at[0] = began + seconds
    go.set()
    for t in threads:
        t.join()
    result.seconds = time.monotonic() - began  # until the last in-flight request returned
    return result


def enqueue_run(*, seconds: float, queue: str) -> Result:
    """`reliableq.enqueue`, one job per transaction, in this process, for `seconds`."""
    result = Result("Python reliableq.enqueue, 1 job/transaction", 1, 0, 0.0)
    began = time.monotonic()
    stop_at = began + seconds
    n = 0
    while time.monotonic() < stop_at:
        t0 = time.perf_counter()
        with transaction.atomic():
            reliableq.enqueue(KIND, {"n": n}, queue=queue)
        result.latencies_ms.append((time.perf_counter() - t0) * 1000)
        n += 1
    result.jobs = n
    result.seconds = time.monotonic() - began
    return result


def machine() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        (pg,) = cursor.fetchone()
        cursor.execute("SHOW synchronous_commit")
        (sync,) = cursor.fetchone()
    where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({platform.machine()}, {platform.system()}), load average {load} "
        f"at the end, Python {platform.python_version()}, PostgreSQL {pg} ({where}, synchronous_commit={sync})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,16", help="comma-separated client thread counts (1,4,16)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per row (5)")
    parser.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 1), help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=8, help="gunicorn threads per worker (8)")
    args = parser.parse_args(argv)
    client_counts = [int(c) for c in args.clients.split(",") if c.strip()]

    call_command("migrate", verbosity=0)
    run_id = uuid.uuid4().hex[:10]
    prefix = f"bench-{run_id}"
    user = accounts.grant(User.objects.create_user(prefix), "reliableq.submit_job")
    token = Token.objects.create(user=user).key
    port = processes.free_port()
    log_path = Path(os.environ.get("BENCH_LOG", f"/tmp/{prefix}-gunicorn.log"))
    env = processes.child_env(
        DATABASE_URL=dburl.build(connection.settings_dict), TESTPROJECT_SUBMIT_RATE="1000000000/s",
        RELIABLEQ_HTTP_QUEUES='["*"]', RELIABLEQ_MAX_PENDING_PER_SUBMITTER="None",
    )  # fmt: skip
    server: subprocess.Popen[bytes] | None = None
    results: list[Result] = []
    mismatches: list[str] = []
    try:
        with log_path.open("wb") as log:
            server = processes.start_api(port, env=env, log=log, workers=args.workers, threads=args.threads)
        processes.wait_http(f"http://127.0.0.1:{port}/v1/schema", timeout=60, process=server)

        for clients in client_counts:
            queue = f"{prefix}-http-{clients}"
            result = http_run("127.0.0.1", port, token, clients=clients, seconds=args.seconds, queue=queue)
            results.append(result)
            stored = Job.objects.filter(queue=queue).count()
            if stored != result.jobs:
                mismatches.append(f"{clients} clients: {result.jobs} answered 202, {stored} rows")
            print(
                f"  http, {clients:>2} clients: {result.rate:8.1f} jobs/s ({result.jobs} jobs, "
                f"{result.errors} non-202)",
                file=sys.stderr,
            )

        queue = f"{prefix}-enqueue"
        result = enqueue_run(seconds=args.seconds, queue=queue)
        results.append(result)
        stored = Job.objects.filter(queue=queue).count()
        if stored != result.jobs:
            mismatches.append(f"enqueue: {result.jobs} enqueued, {stored} rows")
        print(f"  enqueue:           {result.rate:8.1f} jobs/s ({result.jobs} jobs)", file=sys.stderr)
    finally:
        if server is not None:
            processes.stop(server)
        deleted, _ = Job.objects.filter(queue__startswith=prefix).delete()
        Token.objects.filter(user=user).delete()
        user.delete()
        print(f"  cleaned up: {deleted} rows deleted, user and token removed, server stopped", file=sys.stderr)

    print()
    print(
        f"Ingestion, committed jobs/s ({args.seconds:g} s per row; gunicorn gthread "
        f"{args.workers} workers x {args.threads} threads; kind {KIND})"
    )
    print(f"Machine: {machine()}")
    print()
    print("| path | clients | jobs committed | seconds | jobs/s | p50 ms | p99 ms | non-202 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {r.path} | {r.clients} | {r.jobs} | {r.seconds:.2f} | {r.rate:.0f} | "
            f"{r.percentile(0.5)} | {r.percentile(0.99)} | {r.errors} |"
        )
    print()
    if mismatches:
        print("ROW COUNT MISMATCH: " + "; ".join(mismatches))
        return 1
    print("Row counts match: every job counted as committed is in the database.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
