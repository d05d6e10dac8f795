"""The scenarios. Each measures, passes every run through the gate, and returns a Section for the report."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from . import ceilings
from .core import Gate, Procs, Progress, Summary, percentile, ratio, wait_for
from .profiles import Profile
from .systems import QUEUE, Outcome, Procrastinate, ReliableQ, System, TasksDB, _all, _exec, _one

SLEEP = 0.05


@dataclass
class Section:
    key: str
    title: str
    intro: str = ""
    tables: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def table(header: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def fmt_ratio(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.2f}x"


def fmt_pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.0f}%"


class Bench:
    def __init__(self, profile: Profile, out: Path, progress: Progress, gate: Gate, database_url: str) -> None:
        self.p = profile
        self.out = out
        self.logs = out / "logs"
        self.say = progress.say
        self.gate = gate
        self.database_url = database_url
        self.rq = ReliableQ()
        self.peers: list[System] = [s for s in (Procrastinate(), TasksDB()) if s.available] if profile.peers else []
        self.missing_peers = [] if not profile.peers else [s.name for s in (Procrastinate(), TasksDB()) if not s.available]
        self.rates: dict[str, float] = {}
        self.results: dict[str, Any] = {}

    # -- one throughput run ----------------------------------------------------------------

    def size(self, key: str, guess: float, seconds: float | None = None) -> int:
        rate = self.rates.get(key, guess)
        return max(self.p.min_jobs, int(rate * (seconds or self.p.seconds)))

    def run_throughput(self, system: System, procs: Procs | None, job: str, n: int, run: str,
                       *, timeout: float | None = None, drive: Callable[[], None] | None = None) -> float:
        """Load n jobs in one commit, wait for the workers (or `drive`) to finish them, gate, return jobs/s.

        The rate is n over the span the database recorded, from the first start to the last finish,
        so workers' start-up and the harness's polling are not in it.
        """
        system.reset()
        began = time.monotonic()
        system.load(n, job)
        if drive is not None:
            drive()
        wait_for(lambda: system.unfinished() == 0, timeout=timeout or max(60.0, n / 20), interval=0.05,
                 what=f"{run}: {n} jobs to finish", procs=procs)
        wall = time.monotonic() - began
        o = system.outcome()
        self.gate_outcome(run, o, n=n, attempts=n)
        self.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
        return n / o.span

    def gate_outcome(self, run: str, o: Outcome, *, n: int, attempts: int | None = None, dead: int = 0) -> None:
        g = self.gate
        g.check(run, f"{n} jobs stored", o.total == n)
        g.check(run, "every job terminal", o.unfinished == 0)
        g.check(run, f"succeeded + dead = jobs ({o.succeeded} + {o.dead} = {n})", o.succeeded + o.dead == n)
        if dead is not None and attempts is not None:
            g.check(run, f"{dead} dead", o.dead == dead)
        if attempts is not None:
            g.check(run, f"one attempt per job ({o.attempts} attempts)", o.attempts == attempts)
        g.check(run, f"attempt history matches the counters ({o.attempt_rows} rows)", o.attempt_rows == o.attempts)
        g.check(run, "no attempt left open", o.open_attempts == 0)

    def sweep(self, system: System, *, processes: int, concurrency: int, job: str, tag: str, guess: float,
              reps: int | None = None, env: dict[str, Any] | None = None) -> Summary:
        """Start a fleet, warm it up, measure `reps` runs, stop it."""
        key = f"{system.key}:{job}:{processes}x{concurrency}"
        values = []
        with Procs(self.logs) as procs:
            system.start_workers(procs, processes=processes, concurrency=concurrency, tag=tag, **(env or {}))
            system.warm_up(procs, processes * concurrency)
            for rep in range(reps or self.p.reps):
                n = self.size(key, self.rates.get(f"{system.key}:{job}", guess))
                run = f"{tag} {system.name} {job} {system.describe(processes, concurrency)} rep {rep + 1}"
                rate = self.run_throughput(system, procs, job, n, run)
                self.rates[key] = self.rates[f"{system.key}:{job}"] = rate
                values.append(rate)
                self.say(f"  {run}: {rate:,.0f} jobs/s ({n} jobs)")
        return Summary(values)

    # -- 1. ingestion ------------------------------------------------------------------------

    def ingestion(self) -> Section:
        from django.contrib.auth.models import User
        from rest_framework.authtoken.models import Token

        from testproject import accounts, processes

        from . import ingest

        s = Section("ingestion", "Durable ingestion: committed submissions per second")
        s.intro = ("A submission counts once its transaction has committed. HTTP: `POST /v1/jobs` through gunicorn "
                   "(gthread, 2 workers x 8 threads) from N client threads, each on its own keep-alive connection; "
                   "every 202 is a committed job. Python: each system's own enqueue call, one job per transaction, "
                   f"in this one process; bulk: {self.p.bulk_size} jobs per transaction.")
        secs = self.p.ingest_seconds
        http: dict[int, Summary] = {}
        _exec("TRUNCATE reliableq_attempt, reliableq_returnvalue, reliableq_job")
        User.objects.filter(username="bench").delete()
        user = accounts.grant(User.objects.create_user("bench"), "reliableq.submit_job")
        token = Token.objects.create(user=user).key
        port = processes.free_port()
        with Procs(self.logs) as procs:
            server = procs.spawn("gunicorn", _gunicorn_argv(port), env=_env())
            processes.wait_http(f"http://127.0.0.1:{port}/v1/schema", timeout=60, process=server)
            for clients in self.p.ingest_clients:
                values = []
                for rep in range(self.p.reps):
                    queue = f"ingest-{clients}-{rep}"
                    run = f"ingest HTTP {clients} clients rep {rep + 1}"
                    began = time.monotonic()
                    result = ingest.http_run("127.0.0.1", port, token, clients=clients, seconds=secs, queue=queue)
                    wall = time.monotonic() - began
                    stored = _one("SELECT count(*) FROM reliableq_job WHERE queue = %s", [queue])[0]
                    self.gate.check(run, f"rows = 202s ({stored} = {result.jobs})", stored == result.jobs)
                    self.gate.check(run, f"no error answers ({result.errors})", result.errors == 0)
                    self.gate.window(run, [ms / 1000 for ms in result.latencies_ms], wall, "request latency")
                    values.append(result.rate)
                    self.say(f"  {run}: {result.rate:,.0f} jobs/s")
                http[clients] = Summary(values)
        Token.objects.filter(user=user).delete()
        user.delete()

        modes = [("one", "Python, 1 job per transaction (autocommit: each call commits)"),
                 ("atomic", "Python, 1 job per `transaction.atomic()` block (as in a view)"),
                 ("bulk", f"Python, bulk: {self.p.bulk_size} jobs per transaction, one call")]
        python: dict[str, dict[str, Summary]] = {}
        for system in [self.rq, *self.peers]:
            python[system.key] = {mode: Summary([]) for mode, _ in modes}
            for rep in range(self.p.reps):
                for mode, _ in modes:
                    if mode == "bulk" and not system.has_bulk:
                        continue
                    python[system.key][mode].values.append(self._enqueue_run(system, rep, mode))
            system.reset()

        rq_one = python["reliableq"]["one"].median
        rows = [[f"HTTP `POST /v1/jobs`, {c} client{'s' if c > 1 else ''}", http[c].text(), "", ""]
                for c in self.p.ingest_clients]
        for mode, label in modes:
            rq = python["reliableq"][mode]
            cells = [label, rq.text()]
            for peer in ("procrastinate", "tasksdb"):
                got = python.get(peer, {}).get(mode)
                cells.append(f"{got.text()} ({fmt_ratio(ratio(rq.median, got.median))})" if got and got.values
                             else "n/a (no bulk API)" if peer == "tasksdb" and peer in python else "n/a")
            rows.append(cells)
        s.tables.append(table(["path", "ReliableQ jobs/s", "procrastinate jobs/s (ReliableQ ratio)",
                               "django-tasks-db jobs/s (ReliableQ ratio)"], rows))
        s.notes.append("HTTP is bound by the API view's own work per request (DRF token lookup, the serializers, "
                       "reading the job back with its attempt history for the response), not by the queue: compare "
                       "the Python rows, which commit the same INSERT. `reliableq/api` was left out of this work.")
        s.notes.append("Each system's own enqueue API: `reliableq.enqueue()` / `reliableq.enqueue_many()`, "
                       "procrastinate's `defer()` / `batch_defer()` (its Django connector, on Django's connection), "
                       "and Django's `task.enqueue()` on the django-tasks-db backend, which has no bulk path.")
        s.data = {"http": {c: v.to_json() for c, v in http.items()},
                  "python": {k: {m: v.to_json() for m, v in d.items()} for k, d in python.items()}}
        self.results["enqueue_one"] = rq_one
        self.results["ingestion"] = s.data
        from . import report

        s.plots.append(report.plot_ingestion(self.out, http, python, self.p.bulk_size))
        return s

    def _enqueue_run(self, system: System, rep: int, mode: str) -> float:
        system.reset()
        run = f"ingest {system.name} {mode} rep {rep + 1}"
        n = 0
        latencies = []
        began = time.monotonic()
        stop_at = began + self.p.ingest_seconds
        size = self.p.bulk_size
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
        self.gate.check(run, f"rows = submissions ({stored} = {n})", stored == n)
        self.gate.window(run, latencies, wall, "commit latency")
        rate = n / wall
        self.say(f"  {run}: {rate:,.0f} jobs/s")
        return rate

    # -- 2. execution throughput ---------------------------------------------------------------

    def throughput(self) -> Section:
        s = Section("throughput", "Execution throughput: no-op jobs")
        fp, fc = self.p.fleet
        s.intro = ("No-op jobs (the cost of the queue itself). Each run loads N due jobs in one commit into idle, "
                   "warmed-up workers; the rate is N over the span the database recorded from the first start to "
                   "the last finish. Top: one worker process against its concurrency. Then worker processes at "
                   f"concurrency {fc}. The peers run the same no-op at the fleet configuration ({fp} x {fc}) and at "
                   f"1 x {fc}.")
        by_conc = {}
        for c in self.p.concurrency:
            self.say(f"throughput: ReliableQ 1 x {c}")
            by_conc[c] = self.sweep(self.rq, processes=1, concurrency=c, job="noop", tag=f"tp-c{c}", guess=600)
        by_proc = {}
        for pr in self.p.processes:
            if pr == 1 and fc in by_conc:
                by_proc[pr] = by_conc[fc]
                continue
            self.say(f"throughput: ReliableQ {pr} x {fc}")
            by_proc[pr] = self.sweep(self.rq, processes=pr, concurrency=fc, job="noop", tag=f"tp-p{pr}", guess=800)
        fleet = by_proc.get(fp) or self.sweep(self.rq, processes=fp, concurrency=fc, job="noop", tag="tp-fleet",
                                               guess=800)
        peers: dict[str, dict[str, Summary]] = {}
        for peer in self.peers:
            peers[peer.key] = {}
            for pr in sorted({1, fp}):
                self.say(f"throughput: {peer.name} at {pr} x {fc}")
                peers[peer.key][f"{pr}x{fc}"] = self.sweep(peer, processes=pr, concurrency=fc, job="noop",
                                                           tag=f"tp-{peer.key}-{pr}", guess=300)
        rows = [[f"1 x {c}", by_conc[c].text()] for c in self.p.concurrency]
        s.tables.append("**One worker process, by concurrency**\n\n" + table(["processes x concurrency", "ReliableQ jobs/s"], rows))
        rows = [[f"{pr} x {fc}", by_proc[pr].text()] for pr in self.p.processes]
        s.tables.append(f"**Worker processes at concurrency {fc}**\n\n" + table(["processes x concurrency", "ReliableQ jobs/s"], rows))
        rows = []
        for pr in sorted({1, fp}):
            ours = by_proc.get(pr) or (by_conc.get(fc) if pr == 1 else fleet)
            cells = [f"{pr} x {fc}", ours.text()]
            for peer in self.peers:
                got = peers[peer.key][f"{pr}x{fc}"]
                cells += [f"{got.text()} ({peer.describe(pr, fc)})", fmt_ratio(ratio(ours.median, got.median))]
            rows.append(cells)
        header = ["ReliableQ config", "ReliableQ jobs/s"]
        for peer in self.peers:
            header += [f"{peer.name} jobs/s (its workers)", f"ReliableQ / {peer.name}"]
        s.tables.append("**Side by side with the peers, pair by pair**\n\n" + table(header, rows))
        if any(isinstance(p, TasksDB) for p in self.peers):
            s.notes.append("django-tasks-db's `db_worker` runs one task at a time, so it gets one process per "
                           f"ReliableQ slot (capped at {TasksDB.MAX_PROCESSES}), polling every 0.1 s when idle. "
                           "procrastinate runs the same processes x concurrency as ReliableQ.")
        self.results["fleet"] = fleet
        self.results["fleet_peers"] = {k: v[f"{fp}x{fc}"] for k, v in peers.items()}
        s.data = {"by_concurrency": {c: v.to_json() for c, v in by_conc.items()},
                  "by_processes": {p: v.to_json() for p, v in by_proc.items()},
                  "peers": {k: {cfg: v.to_json() for cfg, v in d.items()} for k, d in peers.items()}}
        self.results["throughput"] = (by_conc, by_proc, peers)
        return s

    # -- ceilings --------------------------------------------------------------------------------

    def ceilings(self) -> Section:
        fp, fc = self.p.fleet
        s = Section("ceilings", "Ceilings: PostgreSQL's own limit and bare Python's")
        s.intro = (f"The same claim and finish statements that the worker sends (captured from `reliableq.leases` at "
                   f"run time), with the fleet's {fp} client(s) and batches of {fc} (the worker's concurrency, the "
                   "largest claim it makes), in the same transactions: the claim as one autocommit statement "
                   "(the worker's periodic rescue, once per POLL_SECONDS, is left out), the finish in BEGIN ... "
                   "COMMIT. pgbench: both in a script, `-M prepared`, the batch's ids passed with `\\gset`. Bare "
                   "loop: one Python process per client, psycopg only (no Django, threads or handlers), claim "
                   "then finish.")
        self.rq.reset()
        spec = ceilings.capture(QUEUE)
        statements = ceilings.write_statements(spec, self.out / "statements.json")
        script = self.out / "cycle.pgbench.sql"
        script.write_text(ceilings.pgbench_script(spec, fc, self.database_url))
        socket_dir = connection.settings_dict["HOST"]
        pg, bare = Summary([]), Summary([])
        guess = self.rates.get("ceiling:pgbench", 4000)
        for rep in range(self.p.reps):
            n = self.size("ceiling:pgbench", guess)
            per_client = math.ceil(n / (fc * fp))
            run = f"ceiling pgbench {fp} clients batch {fc} rep {rep + 1}"

            def drive() -> None:
                ceilings.run_pgbench(script, clients=fp, transactions=per_client + 5, socket_dir=socket_dir,
                                     database=connection.settings_dict["NAME"], log=self.logs / f"pgbench-{rep}.log")

            rate = self.run_throughput(self.rq, None, "noop", n, run, drive=drive)
            self.rates["ceiling:pgbench"] = rate
            pg.values.append(rate)
            self.say(f"  {run}: {rate:,.0f} jobs/s")
        for rep in range(self.p.reps):
            n = self.size("ceiling:bare", self.rates.get("ceiling:bare", 2500))
            run = f"ceiling bare psycopg {fp} processes batch {fc} rep {rep + 1}"

            def drive() -> None:
                start_at = time.time() + 1.0  # all processes connected before the first claim
                with Procs(self.logs) as procs:
                    for i in range(fp):
                        procs.spawn(f"bare-{rep}-{i}", ceilings.bare_argv(statements, batch=fc, worker_id=f"bare-{i}",
                                                                          start_at=start_at), env=_env())
                    for proc in procs.started:
                        proc.wait(timeout=600)
                        if proc.returncode:
                            raise RuntimeError(f"bench.bare exited {proc.returncode}; see {self.logs}")

            rate = self.run_throughput(self.rq, None, "noop", n, run, drive=drive)
            self.rates["ceiling:bare"] = rate
            bare.values.append(rate)
            self.say(f"  {run}: {rate:,.0f} jobs/s")
        fleet = self.results["fleet"]
        def cycle_ms(rate: float) -> str:
            # Per connection: one claim of a full batch plus its finish, at this rate.
            return f"{1000 * fp * fc / rate:.2f}" if rate and not math.isnan(rate) else "n/a"

        rows = [
            ["pgbench (PostgreSQL's limit for this SQL)", pg.text(), cycle_ms(pg.median),
             fmt_pct(ratio(fleet.median, pg.median))],
            ["bare psycopg loop (Python's limit)", bare.text(), cycle_ms(bare.median),
             fmt_pct(ratio(fleet.median, bare.median))],
            [f"ReliableQ fleet {fp} x {fc}", fleet.text(), cycle_ms(fleet.median), "100%"],
        ]
        s.tables.append(table(["ceiling", "jobs/s", f"ms per {fc}-job cycle per connection",
                               "ReliableQ as a fraction"], rows))
        s.notes.append(f"Per cycle and connection: pgbench {cycle_ms(pg.median)} ms, the bare loop "
                       f"{cycle_ms(bare.median)} ms, the ReliableQ worker {cycle_ms(fleet.median)} ms, for four round "
                       "trips each (the claim; BEGIN, the fenced finish, COMMIT). What the worker adds to the bare loop "
                       "is Django's cursor layer, the hand-offs to and from its handler threads and one INFO log line "
                       "per claim and per success; what the bare loop adds to pgbench is Python and psycopg (client-side "
                       "binding, decoding rows). A fraction near or above 100% means the fleet is bound by the same "
                       "round trips as the ceiling, within run-to-run noise (see the ranges).")
        s.notes.append(f"The pgbench script is `{script.name}` and the captured statements `{statements.name}` in this "
                       "folder. The ceilings always claim full batches; the worker claims into the slots that are "
                       "free, which is what it must do.")
        self.results["ceilings"] = {"pgbench": pg, "bare": bare}
        s.data = {"pgbench": pg.to_json(), "bare": bare.to_json()}
        return s

    # -- 3. I/O-bound ---------------------------------------------------------------------------

    def io(self) -> Section:
        s = Section("io", f"I/O-bound jobs: a {SLEEP * 1000:.0f} ms handler")
        s.intro = (f"Each job sleeps {SLEEP * 1000:.0f} ms (a network call). The ideal for concurrency c is "
                   f"c / {SLEEP:g} s jobs/s. One worker process for ReliableQ and procrastinate.")
        ours: dict[int, Summary] = {}
        peers: dict[str, dict[int, Summary]] = {p.key: {} for p in self.peers}
        for c in self.p.io_concurrency:
            ideal = c / SLEEP
            self.say(f"io: ReliableQ 1 x {c}")
            ours[c] = self.sweep(self.rq, processes=1, concurrency=c, job="sleep", tag=f"io-c{c}", guess=0.8 * ideal)
            for peer in self.peers:
                self.say(f"io: {peer.name} at 1 x {c}")
                peers[peer.key][c] = self.sweep(peer, processes=1, concurrency=c, job="sleep", tag=f"io-{peer.key}-{c}",
                                                guess=0.5 * min(ideal, peer_ideal(peer, c)))
        header = ["concurrency", "ideal jobs/s", "ReliableQ jobs/s", "of ideal"]
        for peer in self.peers:
            header += [f"{peer.name} jobs/s (its workers)", f"ReliableQ / {peer.name}"]
        rows = []
        for c in self.p.io_concurrency:
            ideal = c / SLEEP
            cells = [c, f"{ideal:,.0f}", ours[c].text(), fmt_pct(ours[c].median / ideal)]
            for peer in self.peers:
                got = peers[peer.key][c]
                cells += [f"{got.text()} ({peer.describe(1, c)})", fmt_ratio(ratio(ours[c].median, got.median))]
            rows.append(cells)
        s.tables.append(table(header, rows))
        if any(isinstance(p, TasksDB) for p in self.peers):
            s.notes.append(f"django-tasks-db runs one process per slot, capped at {TasksDB.MAX_PROCESSES} processes "
                           "(each a full Django process; more would not fit this machine), so at high concurrency it "
                           "has fewer slots than the others.")
        s.data = {"reliableq": {c: v.to_json() for c, v in ours.items()},
                  "peers": {k: {c: v.to_json() for c, v in d.items()} for k, d in peers.items()}}
        from . import report

        s.plots.append(report.plot_io(self.out, ours, peers, SLEEP))
        return s

    # -- 4. latency -----------------------------------------------------------------------------

    def latency(self) -> Section:
        fp, fc = 1, self.p.fleet[1]
        rate, secs = self.p.latency_rate, self.p.latency_seconds
        s = Section("latency", "Latency from enqueue to start and to finish at a steady load")
        s.intro = (f"{rate:g} no-op jobs/s offered for {secs:g} s, one job per transaction at even intervals, into "
                   f"idle workers ({fp} x {fc}). Timestamps are each system's own: ReliableQ's from the database "
                   "(created_at, the first attempt's started_at, finished_at), procrastinate's from its events "
                   "table (database time), django-tasks-db's from its rows (the worker's clock).")
        results: dict[str, dict[str, list[float]]] = {}
        for system in [self.rq, *self.peers]:
            starts, finishes, achieved = [], [], []
            for rep in range(self.p.reps):
                with Procs(self.logs) as procs:
                    system.start_workers(procs, processes=fp, concurrency=fc, tag=f"lat-{system.key}-{rep}")
                    system.warm_up(procs, fp * fc)
                    run = f"latency {system.name} rep {rep + 1}"
                    began = time.monotonic()
                    n = int(rate * secs)
                    for i in range(n):
                        delay = began + i / rate - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                        system.enqueue("noop")
                    offered = time.monotonic() - began
                    wait_for(lambda: system.unfinished() == 0, timeout=120, interval=0.05, what=f"{run} to drain",
                             procs=procs)
                    wall = time.monotonic() - began
                o = system.outcome()
                self.gate_outcome(run, o, n=n, attempts=n)
                pairs = system.latencies()
                self.gate.check(run, f"a latency sample for every job ({len(pairs)})", len(pairs) == n)
                self.gate.window(run, [x for pair in pairs for x in pair], wall)
                starts += [a for a, _ in pairs]
                finishes += [b for _, b in pairs]
                achieved.append(n / offered)
                self.say(f"  {run}: start p50 {1000 * percentile([a for a, _ in pairs], 50):.1f} ms, "
                         f"p99 {1000 * percentile([a for a, _ in pairs], 99):.1f} ms")
            system.reset()
            results[system.key] = {"start": starts, "finish": finishes, "offered": achieved}
        header = ["system", "offered jobs/s", "start p50 ms", "start p95 ms", "start p99 ms", "finish p50 ms",
                  "finish p95 ms", "finish p99 ms"]
        rows = []
        names = {"reliableq": "ReliableQ", "procrastinate": "procrastinate", "tasksdb": "django-tasks-db"}
        for key, r in results.items():
            rows.append([names[key], f"{sum(r['offered']) / len(r['offered']):.0f}",
                         *[f"{1000 * percentile(r[k], q):.1f}" for k in ("start", "finish") for q in (50, 95, 99)]])
        s.tables.append(table(header, rows))
        s.notes.append("All repetitions pooled. ReliableQ's idle workers wake on LISTEN/NOTIFY; procrastinate "
                       "listens too; django-tasks-db polls (every 0.1 s here).")
        s.data = {k: {"start": {q: percentile(r["start"], q) for q in (50, 95, 99)},
                      "finish": {q: percentile(r["finish"], q) for q in (50, 95, 99)}, "samples": len(r["start"])}
                  for k, r in results.items()}
        from . import report

        s.plots.append(report.plot_latency(self.out, results, names))
        return s

    # -- 5. claim cost as finished rows pile up -------------------------------------------------

    def pileup(self) -> Section:
        fp, fc = self.p.fleet
        s = Section("pileup", "Claim cost as finished jobs pile up")
        s.intro = (f"The same no-op run ({fp} x {fc}) on a table that also holds 0 to "
                   f"{max(self.p.pileup):,} finished jobs (SUCCEEDED, each with its attempt row; bulk-inserted, "
                   "then VACUUM ANALYZE and a CHECKPOINT, so that the bulk load's upkeep is not charged to the claims). The claim's plan is EXPLAIN (ANALYZE, BUFFERS) of the take "
                   "statement the worker sends, captured from `reliableq.leases`, over 200 due jobs, rolled back.")
        self.rq.reset()
        rates: dict[int, Summary] = {}
        plans: dict[int, str] = {}
        filled = 0
        with Procs(self.logs) as procs:
            self.rq.start_workers(procs, processes=fp, concurrency=fc, tag="pile")
            self.rq.warm_up(procs, fp * fc)
            for level in self.p.pileup:
                if level > filled:
                    t0 = time.monotonic()
                    _fill_finished(level - filled)
                    filled = level
                    self.say(f"pileup: {filled:,} finished rows ({time.monotonic() - t0:.1f} s to insert, vacuum and checkpoint)")
                plans[level] = _claim_plan(fc)
                values = []
                for rep in range(self.p.reps):
                    key = "pile"
                    n = self.size(key, self.rates.get(f"reliableq:noop:{fp}x{fc}", 800), self.p.pileup_seconds)
                    run = f"pileup {level:,} finished rows rep {rep + 1}"
                    rate = self._pile_run(procs, n, run, filled)
                    self.rates[key] = rate
                    values.append(rate)
                    self.say(f"  {run}: {rate:,.0f} jobs/s")
                rates[level] = Summary(values)
        self.rq.reset()
        base = rates[self.p.pileup[0]].median
        rows = [[f"{level:,}", rates[level].text(), fmt_pct(ratio(rates[level].median, base)),
                 _plan_time(plans[level])] for level in self.p.pileup]
        s.tables.append(table(["finished rows", "jobs/s", "of the empty table", "take statement, EXPLAIN ANALYZE ms"], rows))
        top = max(self.p.pileup)
        s.notes.append(f"The take statement's plan at {top:,} finished rows:\n\n```\n{plans[top]}\n```")
        self.results["pileup"] = (base, rates[top].median, top)
        s.data = {"rates": {k: v.to_json() for k, v in rates.items()}, "plans": plans}
        from . import report

        s.plots.append(report.plot_pileup(self.out, rates))
        return s

    def _pile_run(self, procs: Procs, n: int, run: str, filled: int) -> float:
        _exec("DELETE FROM reliableq_attempt WHERE job_id IN (SELECT id FROM reliableq_job WHERE kind = 'bench.noop')")
        _exec("DELETE FROM reliableq_job WHERE kind = 'bench.noop'")
        began = time.monotonic()
        self.rq.load(n, "noop")
        wait_for(lambda: self.rq.unfinished() == 0, timeout=max(60.0, n / 20), interval=0.05, what=run, procs=procs)
        wall = time.monotonic() - began
        o = self.rq.outcome("j.kind = 'bench.noop'")
        self.gate_outcome(run, o, n=n, attempts=n)
        kept = _one("SELECT count(*) FROM reliableq_job WHERE kind = 'bench.filler' AND status = 'SUCCEEDED'")[0]
        self.gate.check(run, f"the {filled:,} finished rows untouched", kept == filled)
        self.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
        return n / o.span

    # -- 6. recovery ------------------------------------------------------------------------------

    def recovery(self) -> Section:
        s = Section("recovery", "Recovery after SIGKILL of a real worker")
        s.intro = ("For each lease length, worker A (`runworker --lease-seconds L`, its own queue) claims a job that "
                   "would run for minutes; a rescuer worker B (default POLL_SECONDS=1) serves every queue. A is "
                   "killed with SIGKILL at a random moment in its lease cycle. Recovery is from the kill (database "
                   "clock, read just before the signal) to the start of attempt 2 on B (database clock).")
        rng = random.Random(7)
        trials = [(lease, i) for lease in self.p.leases for i in range(self.p.recovery_trials)]
        self.rq.reset()
        samples: dict[float, list[float]] = {lease: [] for lease in self.p.leases}
        began = time.monotonic()
        with Procs(self.logs) as procs:
            a_procs = {}
            for lease, i in trials:
                queue = f"rec-{lease:g}-{i}"
                a_procs[(lease, i)] = procs.manage(
                    f"rec-A-{lease:g}-{i}",
                    ["runworker", "--queues", queue, "--concurrency", "1", "--lease-seconds", f"{lease:g}",
                     "--worker-id", f"A-{lease:g}-{i}"],
                    env=_env(RELIABLEQ_LOG_LEVEL="WARNING"),
                )
            jobs = {}
            for (lease, i) in trials:
                import reliableq

                with transaction.atomic():
                    jobs[(lease, i)] = reliableq.enqueue("bench.hold", {"seconds": 600, "then": 0},
                                                         queue=f"rec-{lease:g}-{i}").id
            wait_for(lambda: _one("SELECT count(*) FROM reliableq_job WHERE kind = 'bench.hold' AND status = 'RUNNING'")[0]
                     == len(trials), timeout=60, what="every worker A to claim its job", procs=procs)
            queues = ",".join(f"rec-{lease:g}-{i}" for lease, i in trials)
            procs.manage("rec-B", ["runworker", "--queues", queues, "--concurrency", "8", "--worker-id", "B"],
                         env=_env(RELIABLEQ_LOG_LEVEL="WARNING"))
            time.sleep(3.0)  # B is up and idle, polling
            kills = {}
            order = sorted(trials, key=lambda t: rng.random())
            for trial in order:
                lease, _ = trial
                time.sleep(rng.uniform(0, lease / 3))  # anywhere in the heartbeat cycle
                (kills[trial],) = _one("SELECT extract(epoch FROM clock_timestamp())")
                os.kill(a_procs[trial].pid, signal.SIGKILL)
                a_procs[trial].wait()
            ids = [str(j) for j in jobs.values()]
            wait_for(lambda: _one("SELECT count(*) FROM reliableq_job WHERE id = ANY(%s::uuid[]) AND status = 'SUCCEEDED'",
                                  [ids])[0] == len(ids), timeout=max(self.p.leases) * 3 + 30, what="every job recovered")
            wall = time.monotonic() - began
            for trial, job_id in jobs.items():
                run = f"recovery lease {trial[0]:g}s trial {trial[1] + 1}"
                rows = _all("SELECT number, outcome, worker_id, extract(epoch FROM started_at) FROM reliableq_attempt "
                            "WHERE job_id = %s ORDER BY number", [job_id])
                self.gate.check(run, "two attempts: LEASE_EXPIRED on A, SUCCEEDED on B",
                                [(r[0], r[1], r[2][:1]) for r in rows] == [(1, "LEASE_EXPIRED", "A"), (2, "SUCCEEDED", "B")])
                took = float(rows[1][3]) - float(kills[trial])
                self.gate.window(run, [took], wall, "recovery time")
                samples[trial[0]].append(took)
                self.say(f"  {run}: recovered in {took:.2f} s")
        self.rq.reset()
        rows = []
        met = True
        for lease in self.p.leases:
            v = samples[lease]
            worst = max(v)
            ok = worst <= lease + 1.0
            met &= ok
            rows.append([f"{lease:g} s", len(v), f"{statistics_mean(v):.2f}", f"{worst:.2f}", f"{lease + 1:g}",
                         "met" if ok else f"missed by {worst - lease - 1:.2f} s"])
        s.tables.append(table(["lease", "kills", "mean recovery s", "worst s", "target (lease + 1 s)", ""], rows))
        s.notes.append("Peers: neither has an equivalent to measure. procrastinate marks a crashed worker's job "
                       "'doing' until someone retries stalled jobs (a call the application schedules itself); "
                       "django-tasks-db leaves it RUNNING. Neither re-runs it by itself.")
        s.notes.append("Recovery = what was left of the lease at the kill (between 2/3 L and L, the heartbeat renews "
                       "every L/3) + up to one POLL_SECONDS for the rescuer's next claim.")
        self.results["recovery"] = (met, {k: max(v) for k, v in samples.items()})
        s.data = {f"{k:g}": v for k, v in samples.items()}
        from . import report

        s.plots.append(report.plot_recovery(self.out, samples))
        return s

    # -- 7. retry amplification -------------------------------------------------------------------

    def amplification(self) -> Section:
        from .jobs import FLAKY_BUDGET

        s = Section("amplification", "Retry amplification: attempts per job under transient failures")
        n = self.p.flaky_jobs
        s.intro = (f"{n:,} jobs per failure rate p; each attempt fails transiently with probability p (a hash of the "
                   f"job id and attempt number), budget {FLAKY_BUDGET} attempts. Theory: E[attempts] = "
                   f"(1 - p^{FLAKY_BUDGET}) / (1 - p); a job ends DEAD with probability p^{FLAKY_BUDGET}. Backoff is "
                   "shortened (base 5 ms, cap 20 ms) so the run takes seconds; it changes when, not how often.")
        self.rq.reset()
        fc = self.p.fleet[1]
        rows = []
        worst = 0.0
        data = {}
        with Procs(self.logs) as procs:
            self.rq.start_workers(procs, processes=1, concurrency=fc, tag="amp", RELIABLEQ_BACKOFF_BASE_SECONDS="0.005",
                                  RELIABLEQ_BACKOFF_MAX_SECONDS="0.02", RELIABLEQ_LOG_LEVEL="WARNING")
            self.rq.warm_up(procs, fc)
            began = time.monotonic()
            for p in self.p.flaky_rates:
                self.rq.load(n, "flaky", {"rate": p})
            total = n * len(self.p.flaky_rates)
            wait_for(lambda: self.rq.unfinished() == 0, timeout=300, interval=0.1, what="flaky jobs to settle", procs=procs)
            wall = time.monotonic() - began
        run = "amplification"
        o = self.rq.outcome()
        self.gate_outcome(run, o, n=total, attempts=None, dead=None)  # type: ignore[arg-type]
        over = _one("SELECT count(*) FROM reliableq_job WHERE attempts > max_attempts")[0]
        self.gate.check(run, "no job over its budget", over == 0)
        self.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
        for p in self.p.flaky_rates:
            attempts, dead = _one("SELECT sum(attempts), count(*) FILTER (WHERE status = 'DEAD') FROM reliableq_job "
                                  "WHERE (payload->>'rate')::float8 = %s", [p])
            measured = float(attempts) / n
            theory = sum(p ** k for k in range(FLAKY_BUDGET))
            err = abs(measured - theory) / theory
            worst = max(worst, err)
            rows.append([f"{p:.0%}", f"{measured:.4f}", f"{theory:.4f}", f"{100 * err:.2f}%", f"{dead / n:.4f}",
                         f"{p ** FLAKY_BUDGET:.4f}"])
            data[p] = {"measured": measured, "theory": theory, "dead": dead / n}
            self.say(f"  amplification p={p:g}: {measured:.4f} attempts/job (theory {theory:.4f})")
        self.rq.reset()
        s.tables.append(table(["failure rate", "attempts per job", "theory", "error", "dead fraction",
                               "theory dead"], rows))
        s.notes.append("Peers: not measured. django-tasks-db has no retries (a failed task stays FAILED); procrastinate "
                       "retries as configured per task, with no budget counted at claim, so a job that crashes its "
                       "worker is not charged an attempt.")
        self.results["amplification"] = worst
        s.data = {f"{k:g}": v for k, v in data.items()}
        from . import report

        s.plots.append(report.plot_amplification(self.out, data))
        return s


# -- helpers ---------------------------------------------------------------------------------


def statistics_mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def peer_ideal(peer: System, c: int) -> float:
    return (TasksDB.MAX_PROCESSES if isinstance(peer, TasksDB) else c) / SLEEP


def _env(**extra: Any) -> dict[str, str]:
    from .core import child_env

    return child_env(**extra)


def _gunicorn_argv(port: int) -> list[str]:
    import sys

    return [sys.executable, "-m", "gunicorn", "testproject.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--workers", "2", "--threads", "8", "--worker-class", "gthread", "--log-level", "warning"]


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
                INSERT INTO reliableq_attempt (job_id, number, worker_id, lease_token, started_at, finished_at, outcome, error)
                SELECT id, 1, 'filler', gen_random_uuid(), now() - interval '1 hour', now(), 'SUCCEEDED', '' FROM made
                """,
                [QUEUE, n],
            )
    _exec("VACUUM ANALYZE reliableq_job")
    _exec("VACUUM ANALYZE reliableq_attempt")
    _exec("CHECKPOINT")


def _claim_plan(batch: int) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the worker's take statement over 200 due jobs, all rolled back."""
    spec = ceilings.capture(QUEUE + "-explain")
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


__all__ = ["Bench", "Section", "uuid", "subprocess"]
