"""Durable ingestion: committed submissions per second, over HTTP and from Python, against the peers."""

from __future__ import annotations

import time

from .. import enqueue_ceilings
from ..core import Procs, Summary, ratio
from ..systems import System, _exec, _one
from .context import Bench
from .helpers import Section, env, fmt_ratio, table
from .registry import scenario


@scenario(
    "ingestion",
    title="Durable ingestion: committed submissions per second",
    knobs=("reps", "ingest_clients", "ingest_seconds", "bulk_size", "peers"),
)
def ingestion(bench: Bench, s: Section) -> None:
    p = bench.p
    s.intro = (
        "A submission counts once its transaction has committed. HTTP: `POST /v1/jobs` through gunicorn "
        "(gthread, 2 workers x 8 threads) from N client threads, each on its own keep-alive connection; "
        "every 202 is a committed job. Python: each system's own enqueue call, one job per transaction, "
        f"in this one process; bulk: {p.bulk_size} jobs per transaction."
    )
    http = _http(bench)
    modes = [
        ("one", "Python, 1 job per transaction (autocommit: each call commits)"),
        ("atomic", "Python, 1 job per `transaction.atomic()` block (as in a view)"),
        ("bulk", f"Python, bulk: {p.bulk_size} jobs per transaction, one call"),
    ]
    python: dict[str, dict[str, Summary]] = {}
    # The ceilings (the same row by bare psycopg and by Django's create) run in the same run, and each
    # repetition runs every system in turn, so that ReliableQ's ratios pair runs of the same minute.
    ceilings = enqueue_ceilings.ceilings()
    systems: list[System] = [bench.rq, *bench.peers, *ceilings]
    for system in systems:
        python[system.key] = {mode: bench.repetitions(system=system.name, path=label) for mode, label in modes}
    for rep in range(p.reps):
        for system in systems:
            for mode, _ in modes:
                if mode == "bulk" and not system.has_bulk:
                    continue
                python[system.key][mode].values.append(_enqueue_run(bench, system, rep, mode))
    for system in systems:
        system.reset()
    for ceiling in ceilings:
        ceiling.close()

    rows = [
        [f"HTTP `POST /v1/jobs`, {c} client{'s' if c > 1 else ''}", http[c].text(), *[""] * 4] for c in p.ingest_clients
    ]
    for mode, label in modes:
        rq = python["reliableq"][mode]
        cells = [label, rq.text()]
        for peer in ("procrastinate", "tasksdb"):
            got = python.get(peer, {}).get(mode)
            cells.append(
                f"{got.text()} ({fmt_ratio(ratio(rq.median, got.median))})"
                if got and got.values
                else "n/a (no bulk API)"
                if peer == "tasksdb" and peer in python
                else "n/a"
            )
        for floor in ("psycopg", "django"):
            got = python[floor][mode]
            cells.append(f"{got.text()} ({ratio(rq.median, got.median):.0%})" if got.values else "n/a")
        rows.append(cells)
    s.tables.append(
        table(
            [
                "path",
                "ReliableQ jobs/s",
                "procrastinate jobs/s (ReliableQ ratio)",
                "django-tasks-db jobs/s (ReliableQ ratio)",
                "ceiling: bare psycopg INSERT jobs/s (ReliableQ's share)",
                "ceiling: Django `create` jobs/s (ReliableQ's share)",
            ],
            rows,
        )
    )
    s.notes.append(
        "HTTP is bound by the API view's own work per request (DRF token lookup, the serializers, "
        "reading the job back with its attempt history for the response), not by the queue: compare "
        "the Python rows, which commit the same INSERT. `reliableq/api` was left out of this work."
    )
    s.notes.append(
        "Each system's own enqueue API: `reliableq.enqueue()` / `reliableq.enqueue_many()`, "
        "procrastinate's `defer()` / `batch_defer()` (its Django connector, on Django's connection), "
        "and Django's `task.enqueue()` on the django-tasks-db backend, which has no bulk path."
    )
    s.notes.append(
        "Ceilings: the row `enqueue` stores, inserted and committed by bare psycopg (a connection of its "
        "own; an atomic call is BEGIN, INSERT, COMMIT; bulk one INSERT from unnest()) and by a plain "
        "Django `Job.objects.create` (`bulk_create` for bulk): bench/enqueue_ceilings.py. "
        "`python -m bench.enqueuecost` counts statements and instructions per call (docs/internals/enqueue.md)."
    )
    s.data = {
        "http": {c: v.to_json() for c, v in http.items()},
        "python": {k: {m: v.to_json() for m, v in d.items()} for k, d in python.items()},
    }
    bench.results["enqueue_one"] = python["reliableq"]["one"]  # a Summary: the targets quote its median and range
    bench.results["enqueue_paths"] = python  # system -> mode -> Summary: the enqueue goals' ratios
    bench.results["ingestion"] = s.data
    from .. import report

    plotted = {k: v for k, v in python.items() if k not in ("psycopg", "django")}  # the table has the ceilings
    s.plots.append(report.plot_ingestion(bench.out, http, plotted, p.bulk_size))


def _http(bench: Bench) -> dict[int, Summary]:
    """POST /v1/jobs through a real gunicorn, from each number of clients; every 202 must be a stored row."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from testproject import accounts, processes

    from .. import ingest

    http: dict[int, Summary] = {}
    _exec("TRUNCATE reliableq_attempt, reliableq_returnvalue, reliableq_batchkey, reliableq_step, reliableq_job")
    User.objects.filter(username="bench").delete()
    user = accounts.grant(User.objects.create_user("bench"), "reliableq.submit_job")
    token = Token.objects.create(user=user).key
    port = processes.free_port()
    with Procs(bench.logs) as procs:
        # The API bounds each user's submissions (rate, queues, unfinished jobs); measured here is the path itself.
        server = procs.spawn(
            "gunicorn", processes.api_argv(port),
            env=env(TESTPROJECT_SUBMIT_RATE="1000000000/s", RELIABLEQ_HTTP_QUEUES='["*"]',
                    RELIABLEQ_MAX_PENDING_PER_SUBMITTER="None"),
        )  # fmt: skip
        processes.wait_http(f"http://127.0.0.1:{port}/v1/schema", timeout=60, process=server)
        for clients in bench.p.ingest_clients:
            http[clients] = bench.repetitions(path="HTTP POST /v1/jobs", clients=clients)
            for rep in range(bench.p.reps):
                queue = f"ingest-{clients}-{rep}"
                run = f"ingest HTTP {clients} clients rep {rep + 1}"
                began = time.monotonic()
                result = ingest.http_run(
                    "127.0.0.1", port, token, clients=clients, seconds=bench.p.ingest_seconds, queue=queue
                )
                wall = time.monotonic() - began
                stored = _one("SELECT count(*) FROM reliableq_job WHERE queue = %s", [queue])[0]
                bench.gate.check(run, f"rows = 202s ({stored} = {result.jobs})", stored == result.jobs)
                bench.gate.check(run, f"no error answers ({result.errors})", result.errors == 0)
                bench.gate.window(run, [ms / 1000 for ms in result.latencies_ms], wall, "request latency")
                http[clients].values.append(result.rate)
                bench.say(f"  {run}: {result.rate:,.0f} jobs/s")
    Token.objects.filter(user=user).delete()
    user.delete()
    return http


def _enqueue_run(bench: Bench, system: System, rep: int, mode: str) -> float:
    """Enqueue for ingest_seconds through the system's own API (one, atomic or bulk); return committed jobs/s."""
    system.reset()
    run = f"ingest {system.name} {mode} rep {rep + 1}"
    n = 0
    latencies = []
    began = time.monotonic()
    stop_at = began + bench.p.ingest_seconds
    size = bench.p.bulk_size
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        if mode == "bulk":
            system.enqueue_bulk(size)
            n += size
        else:
            system.enqueue("noop", atomic=mode == "atomic")
            n += 1
        latencies.append(time.monotonic() - t0)
    wall = time.monotonic() - began
    stored = system.outcome().total
    bench.gate.check(run, f"rows = submissions ({stored} = {n})", stored == n)
    bench.gate.window(run, latencies, wall, "commit latency")
    rate = n / wall
    bench.say(f"  {run}: {rate:,.0f} jobs/s")
    return rate
