"""What one no-op job costs the worker: the statements it sends (pg_stat_statements) and the
instructions its process runs (valgrind's callgrind), both divided by the jobs it ran.

    python -m bench.jobcost [--jobs 20000] [--processes 1] [--concurrency 16]   # statements per job
    python -m bench.jobcost --callgrind [--jobs 2000]                             # instructions per job

Statements: the harness's own PostgreSQL (as `python -m bench`), `--processes` runworker processes
in burst mode on a backlog of --jobs no-op jobs, every top-level statement of every session counted
while they run (BEGIN and COMMIT included): each statement's calls per job and mean time, and the
round trips per job; and the CPU a job cost the worker processes and the PostgreSQL backends that
served them (as the kernel counted it: less moved by a busy machine than a rate, though not immune).
Instructions: one worker in this process, under `valgrind --tool=callgrind`, run twice on a backlog
(a few jobs, then --jobs more); the difference over --jobs is a job's cost in the worker's own
process (its threads, the driver's client side; PostgreSQL's work is not counted). Callgrind counts
the same on a loaded machine as on a quiet one.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

QUEUE = "bench-jobcost"
# The attempt's foreign key, checked by PostgreSQL inside the claim's INSERT: counted by
# pg_stat_statements, but not a statement the worker sends.
FOREIGN_KEY = "foreign key check of an attempt (inside the claim, not sent)"
WARM = 200  # jobs of the first callgrind run, subtracted from the second


def _statements(
    jobs: int, processes: int, concurrency: int, fan_in: bool = False, keyed: bool = False
) -> list[tuple[str, int, float]]:
    """Run the backlog with real workers while pg_stat_statements counts; (query, calls, mean ms) per statement.

    `fan_in`: the backlog is one workflow, jobs - 1 members and a report after them all. `keyed`: jobs
    of the flow scenario's kind limited per key (bench.jobs.KEYS keys, one running each)."""
    import psycopg

    from . import core, statements

    url = core.start_server()
    core.prepare_environment(url)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    import reliableq

    call_command("migrate", verbosity=0)
    from .systems import _exec

    tables = (
        "reliableq_job", "reliableq_attempt", "reliableq_returnvalue", "reliableq_batchkey", "reliableq_step",
        "reliableq_workflowcount", "reliableq_workflowedge", "reliableq_workflowcascade", "reliableq_workflow",
    )  # fmt: skip
    present = [t for t in tables if _exec_one(f"SELECT to_regclass('{t}')") is not None]  # older trees lack some
    _exec(f"TRUNCATE {', '.join(present)}")
    if keyed:
        from reliableq import JobOptions, services

        from .jobs import KEYS, register_flow_kinds

        register_flow_kinds()
        with transaction.atomic():
            keyed_jobs = [
                services.NewJob(
                    kind="bench.keyed", payload={}, options=JobOptions(queue=QUEUE, concurrency_key=f"k{i % KEYS}")
                )
                for i in range(jobs)
            ]
            services.submit_many(keyed_jobs)
    elif fan_in:
        flow = reliableq.workflow(name="jobcost fan-in")
        members = [flow.add("bench.noop", {}, name=f"m{i:06d}", queue=QUEUE) for i in range(jobs - 1)]
        flow.add("bench.noop", {}, name="report", after=members, queue=QUEUE)
        flow.enqueue()
    else:
        with transaction.atomic():
            for start in range(0, jobs, 5000):
                reliableq.enqueue_many("bench.noop", [{}] * min(5000, jobs - start), queue=QUEUE)
    _exec("ANALYZE reliableq_job")
    with statements.tracking(url):
        statements.reset(url)
        from django.db import connections

        connections.close_all()  # its backend's work (the enqueue) is counted before, not with the workers
        server_before = _server_cpu(url)
        began = time.monotonic()
        workers = []
        for n in range(processes):
            argv = ["runworker", "--burst", "--queues", QUEUE, "--concurrency", str(concurrency)]
            argv += ["--worker-id", f"jobcost-{n}"]
            workers.append(
                subprocess.Popen(
                    [sys.executable, str(core.ROOT / "manage.py"), *argv],
                    cwd=core.ROOT,
                    env=core.child_env(**({"BENCH_FLOW": "1"} if keyed else {})),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        worker_cpu = 0.0
        for worker in workers:
            _, status, usage = os.wait4(worker.pid, 0)  # the worker's own CPU, as the kernel counted it
            worker.returncode = os.waitstatus_to_exitcode(status)
            worker_cpu += usage.ru_utime + usage.ru_stime
        seconds = time.monotonic() - began
        server_cpu = _server_cpu(url, before=server_before)
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT query, calls, mean_exec_time FROM pg_stat_statements"
                " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY calls DESC"
            ).fetchall()
    done = _exec_one("SELECT count(*) FROM reliableq_job WHERE status = 'SUCCEEDED'")
    print(f"  {done:,} of {jobs:,} jobs succeeded in {seconds:.1f} s with {processes} x {concurrency}", file=sys.stderr)
    print(
        f"  CPU a job: {1e6 * worker_cpu / jobs:.1f} us in the worker processes (their start included), "
        f"{1e6 * server_cpu / jobs:.1f} us in PostgreSQL (the backends that served them)",
        file=sys.stderr,
    )
    return [(q, int(n), float(ms)) for q, n, ms in rows]


def _server_cpu(url: str, *, before: float = 0.0) -> float:
    """PostgreSQL's CPU seconds in backends that have exited (the postmaster's reaped children), less
    `before`; it waits first for this database's other sessions (the workers') to be gone."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            (others,) = conn.execute(  # type: ignore[misc]
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            ).fetchone()
            if not others:
                break
            time.sleep(0.05)
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
        postmaster = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    time.sleep(0.2)  # the postmaster reaps the last of them
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK") - before  # cutime + cstime


def _exec_one(sql: str) -> Any:
    from .systems import _one

    return _one(sql)[0]


def _label(query: str) -> str:
    q = " ".join(query.split())
    for marker, label in (
        ("FOR KEY SHARE OF x", FOREIGN_KEY),
        ("UPDATE reliableq_job j SET status = 'RUNNING'", "claim"),
        ("picked AS MATERIALIZED", "claim"),
        ("fin AS ( UPDATE reliableq_job", "finish"),
        ("WITH v AS ( SELECT (r ->> $2)::uuid AS id", "finish"),
        ("lease_expires_at = statement_timestamp() + make_interval", "renew"),
        ("INSERT INTO reliableq_leader", "maintenance lease"),
        ("reliableq_worker", "workers panel"),
        ("pg_backend_pid()", "prepare check"),
    ):
        if marker in q:
            return label
    return q[:70]


def _inner(count: int) -> None:
    """Run one worker in this process until `count` jobs it was given are done (under valgrind)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    import reliableq
    from reliableq.worker import loop
    from reliableq.worker.loop import Worker, WorkerConfig

    reliableq.enqueue_many("demo.noop", [{}] * count, queue=QUEUE)
    # No duty on a timer during the run (heartbeat, rescue, schedule, retention): valgrind's slowness
    # would make their number differ from run to run, and the count with it.
    hour = 3600.0
    timers = {"lease_seconds": hour, "poll_seconds": hour, "schedule_seconds": hour, "retention_seconds": hour}
    known = {f.name for f in dataclasses.fields(WorkerConfig)}  # older trees (bisecting) lack some
    config = WorkerConfig(
        queues=(QUEUE,), concurrency=16, burst=True, listen=False, worker_id="jobcost",
        **{name: value for name, value in timers.items() if name in known},
    )  # fmt: skip
    worker = Worker(config)
    freeze = getattr(loop, "freeze_startup_objects", None)  # as runworker does, where the tree has it
    if freeze is not None:
        freeze()
    code = worker.run(install_signals=False)
    if code != 0:
        raise SystemExit(f"the worker exited {code}")


def _instructions(count: int) -> int:
    # Not under a coverage tracer, even when this command runs under one: it would be counted too.
    env = {k: v for k, v in os.environ.items() if k not in ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")}
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "bench.jobcost", "--inner", str(count)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        raise SystemExit(f"callgrind run of {count} jobs failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.jobcost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--callgrind", action="store_true", help="instructions per job instead of statements")
    parser.add_argument("--reps", type=int, default=2, help="callgrind runs of each size (the fewest counts)")
    parser.add_argument("--fan-in", action="store_true", help="the backlog as one workflow: a fan-in and a report")
    parser.add_argument("--keyed", action="store_true", help="the backlog of a kind limited per key (as bench flow's)")
    parser.add_argument("--inner", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner is not None:
        _inner(args.inner)
        return 0
    if args.callgrind:
        if not shutil.which("valgrind"):
            print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
            return 2
        jobs = args.jobs or 2000
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(
            f"  {2 * args.reps} runs under callgrind ({WARM} jobs, then {WARM + jobs}), a minute each", file=sys.stderr
        )
        # The fewest of each size: a run can meet a one-off (a heartbeat's or the leader's duty, whose
        # timing valgrind's slowness moves) that the other did not.
        few = min(_instructions(WARM) for _ in range(args.reps))
        more = min(_instructions(WARM + jobs) for _ in range(args.reps))
        per = (more - few) / jobs
        print(f"Instructions per no-op job in the worker's process (callgrind, 1 x 16, {jobs:,} jobs after {WARM}):")
        print(f"{per / 1e6:.3f} M (fewest of {args.reps}: {few:,} for {WARM} jobs, {more:,} for {WARM + jobs})")
        return 0
    jobs = args.jobs or 20000
    rows = _statements(jobs, args.processes, args.concurrency, args.fan_in, args.keyed)
    grouped: dict[str, list[float]] = {}
    for query, calls, mean in rows:
        label = _label(query)
        entry = grouped.setdefault(label, [0, 0.0])
        entry[1] = (entry[1] * entry[0] + mean * calls) / (entry[0] + calls) if entry[0] + calls else 0.0
        entry[0] += calls
    total = sum(int(n) for label, (n, _) in grouped.items() if label != FOREIGN_KEY)
    backlog = "a fan-in of " if args.fan_in else "keyed, " if args.keyed else ""
    where = f"{args.processes} x {args.concurrency}, {backlog}{jobs:,} jobs; pg_stat_statements, top level"
    print(f"Statements per no-op job ({where})")
    print()
    print("| statement | calls | per job | mean ms |")
    print("| --- | ---: | ---: | ---: |")
    for label, (calls, mean) in sorted(grouped.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"| {label} | {int(calls):,} | {calls / jobs:.3f} | {mean:.3f} |")
    print(f"| every statement sent (round trips) | {total:,} | {total / jobs:.3f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
