"""One seeded chaos run: real workers, a real charge service, a PostgreSQL the suite owns, and faults.

Everything random comes from the seed: the job mix, which workers carry which crash point,
and the schedule of SIGKILL, SIGSTOP, pg_terminate_backend, a PostgreSQL restart, failovers and
the charge service's 503 / no-answer phases. Timing still varies from run to run; the plan does not.

The database is a primary with a synchronous standby (tests/failover/pair.py), reached through
a libpq host list with target_session_attrs=read-write: a failover crashes the primary, promotes
the standby, and rebuilds the old primary as the new standby before the next one. Jobs are
acknowledged all along (the driver's committed inserts, HTTP submissions during the faults), and
every one of them must be there at the end.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.pgbouncer import SERVER_ROLE, PgBouncer, ensure_server_role
from bench.serverconns import ServerConnections
from reliableq.faults import ATTEMPT_POINTS, STEP_POINTS
from testproject import processes
from tests.failover.pair import Pair

from . import pooler
from .invariants import Report, check, check_steps

ROOT = processes.ROOT
DATA_DIR = ROOT / ".pgdata" / "chaos-pair"
CRASH_POINTS = (*ATTEMPT_POINTS, *STEP_POINTS)
LEASE_SECONDS = 1.5
CONCURRENCY = 4
WORKFLOW_EVENTS = ("success", "failure", "complete")
FAIR_SMALL = 6  # jobs of each small fair_key (invariants.check_fair_turns reads this many rounds)
STEP_SHARE = 0.08  # durable-step jobs (steps, sleeps, waits), besides the `jobs`, per job
THREE_STEPS = ("steps.three", "steps.three_async", "steps.three_isolated")


@dataclass(frozen=True)
class Profile:
    seeds: int
    jobs: int  # per seed
    workers: int = 3
    fault_seconds: float = 15.0
    settle_seconds: float = 150.0
    concurrency: int = CONCURRENCY
    # Set: workers and the API reach PostgreSQL through PgBouncer (transaction mode, this pool
    # size); LISTEN goes direct (LISTEN_DATABASE).
    pool_size: int | None = None
    workflows: int = 4  # per seed, submitted over HTTP at the start
    failovers: int = 1  # per seed: the primary crashes and the synchronous standby is promoted


QUICK = Profile(seeds=3, jobs=400)
LONG = Profile(seeds=20, jobs=1200, fault_seconds=30.0, workflows=8, failovers=3)
# Issue 13: the quick profile's seed behind a transaction pooler, 3 processes x 8 slots on 4 server connections.
# PgBouncer is pointed at one server: no failover (a pooler in front of a pair: docs/how-to/deploy.md).
POOLED = Profile(seeds=1, jobs=400, concurrency=8, pool_size=4, failovers=0)
HTTP_RATE = 8.0  # jobs submitted over HTTP per second during the faults, each acknowledged by a 2xx

_pair: Pair | None = None


def shared_pair() -> Pair:
    """The suite's primary and synchronous standby: started once per process, stopped at its exit."""
    global _pair
    if _pair is None:
        _pair = Pair(DATA_DIR, synchronous=True).start()
        atexit.register(_pair.stop)
    else:
        _pair.ensure_standby(synchronous=True)
    return _pair


@dataclass
class Worker:
    name: str
    crash_at: str | None
    process: subprocess.Popen[bytes]
    log: Path
    stopped_until: float = 0.0


@dataclass
class Outcome:
    seed: int
    jobs: int
    seconds: float
    faults: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    report: Report = field(default_factory=Report)
    # Behind a pooler: the most server connections PgBouncer held, and direct LISTEN connections, as
    # PostgreSQL counted them (pg_stat_activity), over `samples` samples.
    peak_pooled: int = 0
    peak_listening: int = 0
    samples: int = 0
    workflow_jobs: int = 0  # the workflows' members and callbacks, besides the `jobs`
    fair_jobs: int = 0  # the fair kind's flood and small keys, besides the `jobs`
    http_jobs: int = 0  # submitted over HTTP during the faults and acknowledged, besides the `jobs`
    step_jobs: int = 0  # multi-step, sleeping and waiting kinds, besides the `jobs`
    emits: list[dict[str, Any]] = field(default_factory=list)  # the driver's emits, as the emitter answered
    deaf_workers: int = 0  # workers whose listener said it hears no NOTIFY

    @property
    def ok(self) -> bool:
        return not self.report.violations


class ChaosRun:
    def __init__(self, seed: int, profile: Profile, *, log_dir: Path, say: Any = print) -> None:
        self.seed = seed
        self.profile = profile
        self.rng = random.Random(seed)
        self.failover_rng = random.Random(f"failover {seed}")
        # The durable steps' jobs, crash points and emits, from streams of their own: the other faults and
        # jobs keep the plans their seeds had before.
        self.step_rng = random.Random(f"steps {seed}")
        self.emit_rng = random.Random(f"emits {seed}")
        self.log_dir = log_dir
        self.say = say
        self.workers: list[Worker] = []
        self.dead_workers: list[Worker] = []
        self.incarnations = 0
        self.faults: Counter[str] = Counter()
        self.workflows: list[str] = []  # ids of the workflows submitted
        self.api: subprocess.Popen[bytes] | None = None
        self.pauses: list[list[Any]] = []  # [paused from, resumed at] by database time
        self.bouncer: PgBouncer | None = None
        self.watch: ServerConnections | None = None
        self.interrupted: set[str] = set()  # workers SIGSTOPped (their leases may expire)
        self.outages: list[tuple[Any, float]] = []  # (database time, monotonic time) a database fault began
        self.pair = shared_pair()
        self.acknowledged: list[uuid.UUID] = []  # every job a commit or a 2xx said exists
        self.submitted: list[uuid.UUID] = []  # of them, the jobs submitted over HTTP during the faults
        self._submitting = threading.Event()
        self._submitter: threading.Thread | None = None
        self._rejoining: threading.Thread | None = None
        self._rejoin_error: BaseException | None = None
        # Each step's function appends "<job> <step> <attempt>" here (testproject.jobs.ran), from any process.
        self.step_log = log_dir / f"seed{seed}-steps.log"
        self.step_log.unlink(missing_ok=True)
        self.events: list[str] = []  # names some jobs wait for, emitted by the driver during the faults
        self.unemitted: list[str] = []  # names waited for with a timeout, never emitted (one rolled back)
        self.emitters: list[subprocess.Popen[str]] = []
        self.emits: list[dict[str, Any]] = []
        self.child_kills_due = 0  # kill_child faults that found no child process yet
        self.next_emit_try = 0.0
        self.emits_due = 0  # emit faults waiting for a waiter of their batch to park (or the faults' end)
        self.fault_start = 0.0

    # -- setup ----------------------------------------------------------------------------

    def database(self) -> dict[str, Any]:
        """The primary alone (for PgBouncer, which is given one server)."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": str(self.pair.primary.port),
        }

    def url(self, application_name: str = "") -> str:
        """Whichever node is primary: both hosts, target_session_attrs=read-write."""
        return self.pair.url(**({"application_name": application_name} if application_name else {}))

    def client_url(self, name: str) -> str:
        """The DATABASE_URL a worker or the API gets: through the pooler if there is one, else direct."""
        if self.bouncer is None:
            return self.url(f"rq-chaos-{name}")
        return self.bouncer.url_for(self.bouncer.dbname, application_name=f"rq-chaos-{name}")

    def start_pooler(self) -> None:
        if self.profile.pool_size is None:
            return
        ensure_server_role(self.url("rq-chaos-admin"))
        self.bouncer = PgBouncer.start(self.database(), pool_size=self.profile.pool_size, server_user=SERVER_ROLE)
        self.watch = pooler.watch(self.url("rq-chaos-watch"))

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url("rq-chaos-admin"), autocommit=True)

    def prepare(self) -> str:
        """Migrate once, empty the tables, make a token for the workers."""
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=ROOT,
            check=True,
            env=processes.child_env(DATABASE_URL=self.url()),
        )
        token = uuid.uuid4().hex
        with self.admin() as conn:
            conn.execute(
                "TRUNCATE reliableq_attempt, reliableq_job, reliableq_queuestate, reliableq_ratewindow, "
                "reliableq_workflow, reliableq_workflowedge, reliableq_workflowcount, reliableq_event, "
                "charges_charge, charges_chargerequest, "
                "charges_servicefault, authtoken_token, auth_user_user_permissions, auth_user CASCADE"
            )
            user_id = conn.execute(
                "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, is_staff,"
                " is_active, date_joined) VALUES ('!', false, 'chaos', '', '', '', false, true, now()) RETURNING id"
            ).fetchone()[0]  # type: ignore[index]
            conn.execute(
                "INSERT INTO authtoken_token (key, user_id, created) VALUES (%s, %s, now())", (token[:40], user_id)
            )
            # The charge job's service account: it may make charges; the run submits its workflows and
            # replays their dead members over HTTP as this user too.
            conn.execute(
                "INSERT INTO auth_user_user_permissions (user_id, permission_id) SELECT %s, p.id"
                "  FROM auth_permission p JOIN django_content_type ct ON ct.id = p.content_type_id"
                " WHERE (ct.app_label, p.codename) IN (('charges', 'add_charge'), ('reliableq', 'submit_job'),"
                " ('reliableq', 'replay_job'))",
                (user_id,),
            )
            conn.execute(
                "INSERT INTO charges_servicefault (id, delay_seconds, unavailable_rate, no_answer_rate) "
                "VALUES (1, 0, 0, 0)"
            )
        return token[:40]

    def env(self, name: str, crash_at: str | None = None) -> dict[str, str]:
        env = processes.child_env(
            DATABASE_URL=self.client_url(name),
            RELIABLEQ_LEASE_SECONDS=LEASE_SECONDS,
            RELIABLEQ_BACKOFF_BASE_SECONDS="0.05",
            RELIABLEQ_BACKOFF_MAX_SECONDS="0.5",
            RELIABLEQ_POLL_SECONDS="0.1",
            RELIABLEQ_FAULT_INJECTION="1",
            CHARGES_SERVICE_URL=self.base_url,
            CHARGES_SERVICE_TOKEN=self.token,
            RELIABLEQ_LOG_LEVEL="WARNING",
            RELIABLEQ_TEST_FLOW="1",
            RELIABLEQ_TEST_FAIR="1",
            TESTPROJECT_SUBMIT_RATE="100000/s",  # the submissions during the faults are not throttled
        )
        for key in ("RELIABLEQ_CRASH_AT", "RELIABLEQ_CRASH_RATE", "RELIABLEQ_CRASH_SEED", "LISTEN_DATABASE_URL"):
            env.pop(key, None)
        if self.bouncer is not None:
            # LISTEN needs a session of its own: a direct connection, under a name the watch counts.
            env.update(
                LISTEN_DATABASE_URL=self.url(f"rq-chaos-{name}{pooler.LISTEN_SUFFIX}"),
                RELIABLEQ_LISTEN_DATABASE="direct",
            )
        if crash_at:
            # Only the step kinds pass a step's crash points, a few times each: they crash more often.
            rng = self.step_rng if crash_at in STEP_POINTS else self.rng
            env.update(
                RELIABLEQ_CRASH_AT=crash_at,
                RELIABLEQ_CRASH_RATE=str(
                    rng.choice([0.1, 0.2, 0.3] if crash_at in STEP_POINTS else [0.01, 0.02, 0.04])
                ),
                RELIABLEQ_CRASH_SEED=str(rng.randrange(10**9)),
            )
        return env

    def start_worker(self, *, faults: bool) -> Worker:
        self.incarnations += 1
        name = f"w{self.incarnations}"
        crash_at = self.rng.choice([None, *ATTEMPT_POINTS]) if faults else None
        if faults and crash_at is None:
            crash_at = self.step_rng.choice([None, *STEP_POINTS])
        log = self.log_dir / f"seed{self.seed}-{name}.log"
        with log.open("wb") as out:
            process = processes.start_worker(
                ["--concurrency", str(self.profile.concurrency), "--worker-id", name, "--grace-seconds", "2"],
                env=self.env(name, crash_at),
                log=out,
            )
        worker = Worker(name=name, crash_at=crash_at, process=process, log=log)
        self.workers.append(worker)
        return worker

    # -- jobs -----------------------------------------------------------------------------

    def job_rows(self, n: int) -> list[tuple[Any, ...]]:
        """(id, kind, payload, budget, concurrency_key): the mix of kinds, flow control's included."""
        rows = []
        for _ in range(n):
            roll = self.rng.random()
            key = None
            if roll < 0.30:
                kind, payload, budget = "charge", {"amount": self.rng.randrange(100, 100000), "currency": "EUR"}, 8
            elif roll < 0.50:
                kind, payload, budget = "chaos.flaky", {"rate": self.rng.choice([0.1, 0.3, 0.5])}, 6
            elif roll < 0.55:
                kind, payload, budget = "test.permanent", {}, 5
            elif roll < 0.60:
                kind, payload, budget = "chaos.slow", {"seconds": round(LEASE_SECONDS * 2, 2)}, 4
            elif roll < 0.70:  # at most 2 RUNNING per key, fleet-wide
                kind, payload, budget = "test.per_key", {"seconds": 0.05}, 6
                key = f"k{self.rng.randrange(4)}"
            elif roll < 0.75:  # at most 10 starts in any second, fleet-wide
                kind, payload, budget = "test.rated", {}, 6
            elif roll < 0.80:  # snoozes give their attempts back
                budget = self.rng.choice([1, 3])
                kind, payload = "test.snooze", {"times": self.rng.randint(1, 2), "seconds": 0.05, "budget": budget}
            elif roll < 0.85:  # some are asked to stop while they run (the cancel_running event)
                kind, payload, budget = "test.cancellable", {"seconds": 0.6}, 4
            elif roll < 0.89:  # async def, on each worker's event loop
                kind, payload, budget = "chaos.async_flaky", {"rate": 0.3, "seconds": 0.05}, 6
            elif roll < 0.94:  # isolation="process": the kill_child fault picks these children
                kind, payload, budget = "chaos.isolated_flaky", {"rate": 0.3, "seconds": 0.3}, 6
            elif roll < 0.96:  # in a child, longer than its lease
                kind, payload, budget = "chaos.isolated_slow", {"seconds": round(LEASE_SECONDS * 2, 2)}, 4
            else:
                kind, payload, budget = "demo.noop", {}, 5
            rows.append((uuid.UUID(int=self.rng.getrandbits(128), version=4), kind, json.dumps(payload), budget, key))
        return rows

    def fair_rows(self, n: int) -> list[tuple[Any, ...]]:
        """(id, kind, payload, budget, fair_key, fair_seq) of test.fair jobs: a flood of one key and four
        small keys, all due at once; each key's turns 0, 1, 2... as enqueue gives a fresh backlog."""
        keys = ["t0"] * max(FAIR_SMALL * 4, n // 10) + [f"t{k}" for k in range(1, 5) for _ in range(FAIR_SMALL)]
        self.rng.shuffle(keys)
        turns: Counter[str] = Counter()
        rows = []
        for key in keys:
            rows.append((uuid.UUID(int=self.rng.getrandbits(128), version=4), "test.fair", '{"seconds": 0.02}', 6,
                         key, float(turns[key])))  # fmt: skip
            turns[key] += 1
        return rows

    def step_rows(self, n: int) -> list[tuple[Any, ...]]:
        """(id, kind, payload, budget, None) of the durable-step kinds: three steps (in a thread, on the
        event loop, in a child; now and then one failing in its first attempt), sleeps, and waits for
        events the driver emits during the faults (a name may have two waiters, or none); two more wait
        with a timeout for events never emitted (one emit of them rolled back). `budget` in a payload is
        the budget before any sleep or wait gave an attempt back."""
        log = str(self.step_log)
        self.events = [f"chaos-{self.seed}-e{k}" for k in range(max(2, n // 6))]
        self.unemitted = [f"chaos-{self.seed}-never{k}" for k in range(2)]
        rows = []
        for _ in range(n):
            roll = self.step_rng.random()
            payload: dict[str, Any] = {"log": log}
            if roll < 0.4:
                kind, budget = self.step_rng.choice(THREE_STEPS), 10
                if kind == "steps.three" and self.step_rng.random() < 0.3:
                    payload["fail_at"] = self.step_rng.choice(["one", "two", "three"])
            elif roll < 0.6:
                kind, budget = self.step_rng.choice(["steps.sleeper", "steps.sleeper_async"]), 6
                payload.update(sleep=round(self.step_rng.uniform(0.2, 1.5), 2), budget=budget)
            else:
                kind, budget = self.step_rng.choice(["steps.waiter", "steps.waiter_async", "steps.waiter_isolated"]), 6
                payload.update(event=self.step_rng.choice(self.events), budget=budget)
            rows.append(
                (uuid.UUID(int=self.step_rng.getrandbits(128), version=4), kind, json.dumps(payload), budget, None)
            )
        for kind, name in zip(("steps.waiter", "steps.waiter_async"), self.unemitted, strict=True):
            payload = {"log": log, "event": name, "timeout": 1.0, "budget": 6}
            rows.append((uuid.UUID(int=self.step_rng.getrandbits(128), version=4), kind, json.dumps(payload), 6, None))
        return rows

    def workflow_bodies(self) -> list[dict[str, Any]]:
        """Fan-out/fan-in and chains: members flaky or dying in their first run, a report that runs
        whatever happened (on_upstream_failure="run"), and all three callbacks."""

        def member(name: str, after: list[str], **extra: Any) -> dict[str, Any]:
            payload = {"rate": self.rng.choice([0.0, 0.2, 0.4]), "dies": self.rng.random() < 0.08}
            return {"name": name, "kind": "chaos.wf_member", "payload": payload, "after": after, **extra}

        callbacks = {event: {"kind": "wf.callback", "payload": {"event": event}} for event in WORKFLOW_EVENTS}
        bodies = []
        for n in range(self.profile.workflows):
            if n % 2 == 0:
                width = self.rng.randint(10, 40)
                members = [member("fetch", [])] + [member(f"load-{i}", ["fetch"]) for i in range(width)]
                members.append(member("report", [f"load-{i}" for i in range(width)]))
                members.append(member("tally", [f"load-{i}" for i in range(width)], on_upstream_failure="run"))
            else:
                length = self.rng.randint(5, 15)
                members = [member(f"link-{i}", [f"link-{i - 1}"] if i else []) for i in range(length)]
            bodies.append({"name": f"chaos {self.seed}/{n}", "members": members, "callbacks": callbacks})
        return bodies

    def http(self, method: str, path: str, body: Any = None, *, key: str = "") -> tuple[int, Any]:
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        request = urllib.request.Request(
            self.base_url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()[:500]
        except OSError as exc:  # no answer (the API's own request may have met the failover)
            return 0, str(exc)

    def submit_workflows(self) -> None:
        for body in self.workflow_bodies():
            code, answer = self.http("POST", "/v1/workflows", body)
            if code != 202:
                raise RuntimeError(f"seed {self.seed}: POST /v1/workflows answered {code}: {answer!r}")
            self.workflows.append(answer["id"])
            self.acknowledged += [uuid.UUID(member["id"]) for member in answer["members"]]

    def replay_dead_members(self) -> int:
        """Replay every DEAD member of the run's workflows over HTTP; how many."""
        with self.admin() as conn:
            dead = [row[0] for row in conn.execute(
                "SELECT id FROM reliableq_job WHERE status = 'DEAD' AND member_name IS NOT NULL"
            )]  # fmt: skip
        for job_id in dead:
            code, answer = self.http("POST", f"/v1/jobs/{job_id}/replay")
            if code != 202:
                raise RuntimeError(f"seed {self.seed}: replay of {job_id} answered {code}: {answer!r}")
        self.faults["replayed_members"] += len(dead)
        return len(dead)

    def enqueue_fair(self, rows: list[tuple[Any, ...]]) -> None:
        with self.admin() as conn, conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO reliableq_job (id, kind, queue, priority, payload, status, attempts, max_attempts,"
                " run_at, worker_id, last_error, fair_key, fair_seq, created_at, updated_at)"
                " VALUES (%s, %s, 'default', 0, %s::jsonb, 'PENDING', 0, %s, now(), '', '', %s, %s, now(), now())",
                rows,
            )
        self.acknowledged += [row[0] for row in rows]

    def enqueue(self, rows: list[tuple[Any, ...]], *, priority: int = 0) -> None:
        with self.admin() as conn, conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO reliableq_job (id, kind, queue, priority, payload, status, attempts, max_attempts,"
                " run_at, worker_id, last_error, concurrency_key, created_at, updated_at)"
                f" VALUES (%s, %s, 'default', {int(priority)}, %s::jsonb, 'PENDING', 0, %s, now(), '', '', %s,"
                " now(), now())",
                rows,
            )
        self.acknowledged += [row[0] for row in rows]

    def stop_submitting(self) -> None:
        self._submitting.set()
        if self._submitter is not None:
            self._submitter.join(timeout=60)

    def submit_over_http(self) -> None:
        """Submit demo.noop jobs all through the faults, each again with its Idempotency-Key until a 2xx
        acknowledges it, as a careful client does; every acknowledged one must exist at the end."""
        while not self._submitting.is_set():
            key = f"chaos-{uuid.uuid4()}"
            while not self._submitting.is_set():
                code, answer = self.http("POST", "/v1/jobs", {"kind": "demo.noop", "payload": {}}, key=key)
                if code in (200, 202):
                    self.submitted.append(uuid.UUID(answer["id"]))
                    self.acknowledged.append(uuid.UUID(answer["id"]))
                    break
                self._submitting.wait(0.2)  # 503 while the database is away, or no answer at all
            self._submitting.wait(1.0 / HTTP_RATE)

    # -- faults ---------------------------------------------------------------------------

    def plan(self) -> list[tuple[float, str]]:
        span = self.profile.fault_seconds
        events = [(self.rng.uniform(1, span), "sigkill") for _ in range(self.rng.randint(2, 4))]
        events += [(self.rng.uniform(1, span - 3), "sigstop") for _ in range(self.rng.randint(1, 2))]
        events += [(self.rng.uniform(1, span), "terminate_backends") for _ in range(self.rng.randint(1, 2))]
        events.append((self.rng.uniform(span * 0.3, span * 0.8), "pg_restart"))
        start = self.rng.uniform(0.5, span * 0.4)
        events += [
            (start, "service_unavailable_50"),
            (start + span * 0.3, "service_no_answer"),
            (start + span * 0.5, "service_healthy"),
        ]
        events += [(self.rng.uniform(0, span * 0.6), "enqueue_more")]
        pause = self.rng.uniform(1, span * 0.7)
        events += [(pause, "pause_queue"), (pause + self.rng.uniform(0.5, 2.0), "resume_queue")]
        events += [(self.rng.uniform(1, span), "cancel_running") for _ in range(self.rng.randint(2, 4))]
        events += [(self.rng.uniform(1, span), "kill_child") for _ in range(self.rng.randint(3, 6))]
        # Emits, in two batches, from a stream of their own too.
        events += [
            (self.emit_rng.uniform(span * 0.3, span * 0.5), "emit"),
            (self.emit_rng.uniform(span * 0.6, span * 0.9), "emit"),
        ]
        # From a stream of their own: the other faults keep the plans their seeds always had.
        events += [
            (self.failover_rng.uniform(span * 0.2, span * 0.9), "failover") for _ in range(self.profile.failovers)
        ]
        return sorted(events)

    def inject(self, event: str) -> None:
        alive = [w for w in self.workers if w.process.poll() is None and not w.stopped_until]
        if event == "sigkill" and alive:
            victim = self.rng.choice(alive)
            victim.process.send_signal(signal.SIGKILL)
        elif event == "sigstop" and alive:
            victim = self.rng.choice(alive)
            victim.process.send_signal(signal.SIGSTOP)
            victim.stopped_until = time.monotonic() + LEASE_SECONDS + 1.0  # past its lease
            self.interrupted.add(victim.name)
        elif event == "kill_child":
            # A handler's child process dies (the OOM killer, a segfault): only its own attempt may fail.
            children = [(w, pid) for w in alive for pid in children_of(w.process.pid)]
            if not children:
                # None yet (on a loaded machine a worker may not have started one): it lands later.
                self.child_kills_due += 1
                return
            _, pid = self.rng.choice(children)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
        elif event == "terminate_backends":
            with self.admin() as conn:
                began = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE 'rq-chaos-w%%' AND pid <> pg_backend_pid()"
                )
            self.outages.append((began, time.monotonic()))
        elif event == "pg_restart":
            self.rejoined()
            with self.admin() as conn:
                began = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            self.pair.primary.restart()
            self.outages.append((began, time.monotonic()))
        elif event == "failover":
            self.rejoined()
            # The primary crashes; the synchronous standby is promoted a moment later (meanwhile it is
            # the only server up, read-only); the old primary comes back as the new synchronous standby.
            with self.admin() as conn:
                began = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            self.pair.fail_over(gap=self.failover_rng.uniform(0.5, 2.0))
            self.outages.append((began, time.monotonic()))
            # The rebuild (pg_basebackup) runs beside the other faults; the next database fault waits for it.
            self._rejoining = threading.Thread(target=self._rejoin, name="chaos-rejoin", daemon=True)
            self._rejoining.start()
        elif event.startswith("service_"):
            rates = {
                "service_unavailable_50": (0.5, 0.0),
                "service_no_answer": (0.0, 0.3),
                "service_healthy": (0.0, 0.0),
            }
            unavailable, no_answer = rates[event]
            with self.admin() as conn:
                conn.execute(
                    "UPDATE charges_servicefault SET unavailable_rate = %s, no_answer_rate = %s",
                    (unavailable, no_answer),
                )
            if event == "service_healthy":
                return
        elif event == "emit":
            if not self.start_emitter():
                self.emits_due += 1
                return
        elif event == "enqueue_more":
            self.enqueue(self.late_rows)
            return
        elif event == "pause_queue":
            with self.admin() as conn:
                conn.execute(
                    "INSERT INTO reliableq_queuestate (name, paused_at, paused_by) VALUES ('default', now(), 'chaos')"
                    " ON CONFLICT (name) DO UPDATE SET paused_at = now(), paused_until = NULL"
                )
                # Committed now: no claim that starts from here on may take a job of the queue.
                self.pauses.append([conn.execute("SELECT clock_timestamp()").fetchone()[0], None])  # type: ignore[index]
        elif event == "resume_queue":
            self.resume_queue()
        elif event == "cancel_running":
            # What services.cancel does to a RUNNING job: ask; the worker learns it at its next renewal.
            with self.admin() as conn:
                conn.execute(
                    "UPDATE reliableq_job SET cancel_requested_at = now() "
                    "WHERE status = 'RUNNING' AND kind = 'test.cancellable' AND cancel_requested_at IS NULL"
                )
        else:
            return
        self.faults[event] += 1

    def start_emitter(self, *, now: bool = False) -> bool:
        """Emit half of the events (all that are left, the second time) in a process of their own, as an
        application does: some twice (a retried webhook), and, the first time, one that rolls back.
        Not yet (False) while none of their waiters is parked, unless `now` or the faults near their end:
        on a loaded machine the waits may not have begun, and every emit would come before its wait."""
        first = not self.emitters
        half = len(self.events) // 2
        names = self.events[:half] if first else self.events[half:]
        late = time.monotonic() - self.fault_start > self.profile.fault_seconds * 0.9
        if not (now or late):
            try:
                with self.admin() as conn:
                    (parked,) = conn.execute(  # type: ignore[misc]
                        "SELECT count(*) FROM reliableq_job WHERE status = 'WAITING' AND waiting_for = ANY(%s)",
                        (names,),
                    ).fetchone()
            except psycopg.OperationalError:  # the database is away (a restart, a failover): later
                return False
            if not parked:
                return False
        batch: list[dict[str, Any]] = [{"name": name, "payload": {"nonce": name}} for name in names]
        batch += [
            {"name": name, "payload": {"nonce": "again"}} for name in self.emit_rng.sample(names, len(names) // 3)
        ]
        if first:
            batch.append({"name": self.unemitted[0], "payload": {"nonce": "rolled back"}, "rollback": True})
        self.emit_rng.shuffle(batch)
        env = processes.child_env(DATABASE_URL=self.url("rq-chaos-emitter"), RELIABLEQ_LOG_LEVEL="WARNING")
        named = self.log_dir / f"seed{self.seed}-emitter{len(self.emitters)}"
        named.with_suffix(".json").write_text(json.dumps(batch))
        with named.with_suffix(".json").open() as stdin, named.with_suffix(".log").open("w") as log:
            emitter = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.emitter"],
                cwd=ROOT, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=log, text=True,
            )  # fmt: skip
        self.emitters.append(emitter)
        return True

    def collect_emits(self) -> None:
        """Wait for the emitters; keep what each emit that committed (or rolled back) answered."""
        for _ in range(self.emits_due):
            self.start_emitter(now=True)
            self.faults["emit"] += 1
        self.emits_due = 0
        for emitter in self.emitters:
            out, _ = emitter.communicate(timeout=300)
            if emitter.returncode != 0:
                raise RuntimeError(f"seed {self.seed}: the emitter exited with {emitter.returncode}; see its log")
            self.emits += [json.loads(line) for line in out.splitlines() if line.strip()]
        self.emitters = []
        self.faults["emitted"] = sum(1 for e in self.emits if not e["rollback"])
        self.faults["woken_by_emits"] = sum(e["woken"] for e in self.emits if not e["rollback"])

    def _rejoin(self) -> None:
        try:
            self.pair.rejoin()
        except BaseException as exc:  # raised on the driver's thread by rejoined()
            self._rejoin_error = exc

    def rejoined(self) -> None:
        """Wait for the old primary's rebuild as the new synchronous standby, if one is under way."""
        if self._rejoining is not None:
            self._rejoining.join()
            self._rejoining = None
        if self._rejoin_error is not None:
            error, self._rejoin_error = self._rejoin_error, None
            raise RuntimeError(f"seed {self.seed}: the old primary could not be rebuilt as a standby") from error

    def resume_queue(self) -> None:
        """End the open pause (retrying through a database restart); the window closes before the resume."""
        if not self.pauses or self.pauses[-1][1] is not None:
            return
        deadline = time.monotonic() + 30
        while True:
            try:
                with self.admin() as conn:
                    self.pauses[-1][1] = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
                    conn.execute("UPDATE reliableq_queuestate SET paused_at = NULL WHERE name = 'default'")
                    conn.execute("SELECT pg_notify('reliableq', 'default')")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def tick(self) -> None:
        """A moment of the fault phase: supervise, and land a kill_child that found no child before."""
        self.supervise(faults=True)
        if self.child_kills_due:
            self.child_kills_due -= 1
            self.inject("kill_child")
        if self.emits_due and time.monotonic() >= self.next_emit_try:
            self.next_emit_try = time.monotonic() + 0.5
            self.emits_due -= 1
            self.inject("emit")
        time.sleep(0.05)

    def supervise(self, *, faults: bool) -> None:
        """Restart workers that died, resume workers stopped past their lease: what a supervisor does."""
        if self.watch is not None:
            self.watch.sample()
        now = time.monotonic()
        for worker in list(self.workers):
            if worker.stopped_until and now >= worker.stopped_until:
                worker.process.send_signal(signal.SIGCONT)
                worker.stopped_until = 0.0
            if worker.process.poll() is not None:
                self.workers.remove(worker)
                self.dead_workers.append(worker)
                self.start_worker(faults=faults)

    # -- the run --------------------------------------------------------------------------

    def run(self) -> Outcome:
        started = time.monotonic()
        self.token = self.prepare()
        self.start_pooler()
        port = processes.free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        api_log = (self.log_dir / f"seed{self.seed}-api.log").open("wb")
        self.api = processes.start_api(port, env=self.env("api"), log=api_log, workers=2, threads=8)
        try:
            processes.wait_http(f"{self.base_url}/v1/schema", process=self.api)
            rows = self.job_rows(self.profile.jobs)
            split = int(len(rows) * 0.6)
            self.enqueue(rows[:split])
            fair = self.fair_rows(self.profile.jobs)
            self.enqueue_fair(fair)
            self.late_rows = rows[split:]
            steps = self.step_rows(int(self.profile.jobs * STEP_SHARE))
            # First in line (priority -1): the waits park early, and the emits during the faults wake them.
            self.enqueue(steps, priority=-1)
            self.submit_workflows()
            for _ in range(self.profile.workers):
                self.start_worker(faults=True)
            self.say(
                f"seed {self.seed}: {len(rows)} jobs, {self.profile.workers} workers x {self.profile.concurrency}, "
                f"faults for {self.profile.fault_seconds:g}s"
                + (f", through PgBouncer (pool size {self.profile.pool_size})" if self.bouncer else "")
            )
            fault_start = self.fault_start = time.monotonic()
            self._submitter = threading.Thread(target=self.submit_over_http, name="chaos-http", daemon=True)
            self._submitter.start()
            for at, event in self.plan():
                while time.monotonic() - fault_start < at:
                    self.tick()
                self.inject(event)
            while time.monotonic() - fault_start < self.profile.fault_seconds:
                self.tick()
            self.stop_submitting()
            self.rejoined()
            self.collect_emits()
            self.settle()
        finally:
            self.stop_submitting()
            for emitter in self.emitters:
                emitter.kill()
                emitter.communicate()
            if self._rejoining is not None:
                self._rejoining.join()
            self.shutdown()
            api_log.close()
        outcome = Outcome(seed=self.seed, jobs=self.profile.jobs, seconds=time.monotonic() - started)
        outcome.fair_jobs = len(fair)
        outcome.http_jobs = len(set(self.submitted))
        outcome.step_jobs = len(steps)
        outcome.emits = self.emits
        outcome.faults = self.faults + self.crash_counts()
        outcome.deaf_workers = self.count_logs("does not hear a NOTIFY")
        if self.watch is not None:
            outcome.peak_pooled = self.watch.sustained["pooled"]
            outcome.peak_listening = self.watch.peaks["listening"]
            outcome.samples = self.watch.samples
        with self.admin() as conn:
            outcome.report = check(
                conn,
                concurrency=self.profile.concurrency,
                pauses=[tuple(p) for p in self.pauses],
                interrupted=self.interrupted | {w.name for w in self.dead_workers},
                outages=[began for began, _ in self.outages],
                lease_seconds=LEASE_SECONDS,
                acknowledged=self.acknowledged,
            )
            check_steps(conn, outcome.report, step_log=self.step_log, emits=self.emits, unemitted=self.unemitted)
            (outcome.workflow_jobs,) = conn.execute(
                "SELECT count(*) FROM reliableq_job WHERE workflow_id IS NOT NULL"
            ).fetchone()  # type: ignore[misc]
            outcome.statuses = Counter(
                dict(conn.execute("SELECT status, count(*) FROM reliableq_job GROUP BY 1").fetchall())
            )
            for fault, n in conn.execute(
                "SELECT fault, count(*) FROM charges_chargerequest WHERE fault <> '' GROUP BY 1"
            ):
                outcome.faults[f"service_{fault}"] = n
        return outcome

    def settle(self) -> None:
        """Faults off: replace crash-prone workers with clean ones and wait until every job is finished."""
        self.resume_queue()
        for worker in list(self.workers):
            if worker.stopped_until:
                worker.process.send_signal(signal.SIGCONT)
                worker.stopped_until = 0.0
            if worker.crash_at:
                processes.stop(worker.process)
        deadline = time.monotonic() + self.profile.settle_seconds
        replays = 0
        while True:
            self.supervise(faults=False)
            if self.child_kills_due:  # kill_child found no child during the faults (a loaded machine): one now
                self.child_kills_due = 0
                self.inject("kill_child")
            try:
                with self.admin() as conn:
                    (left,) = conn.execute(
                        "SELECT count(*) FROM reliableq_job WHERE status NOT IN ('SUCCEEDED', 'DEAD', 'CANCELLED')"
                    ).fetchone()  # type: ignore[misc]
            except psycopg.OperationalError:
                left = -1
            if left == 0:
                # Members that died are replayed once faults are over (twice at most): their
                # workflows start a new run, and the run settles again.
                if replays < 2 and self.replay_dead_members():
                    replays += 1
                    continue
                return
            if time.monotonic() > deadline:
                self.say(f"seed {self.seed}: {left} job(s) still unfinished after {self.profile.settle_seconds:g}s")
                return
            time.sleep(0.2)

    def shutdown(self) -> None:
        for worker in self.workers:
            processes.stop(worker.process)
        if self.api is not None:
            processes.stop(self.api)
        if self.watch is not None:
            self.watch.close()
        if self.bouncer is not None:
            self.bouncer.stop()

    def count_logs(self, text: str) -> int:
        """How many workers' logs say `text`."""
        logs = [w.log for w in self.workers + self.dead_workers if w.log.exists()]
        return sum(1 for log in logs if text in log.read_text(errors="replace"))

    def crash_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for worker in self.workers + self.dead_workers:
            text = worker.log.read_text(errors="replace") if worker.log.exists() else ""
            for point in CRASH_POINTS:
                counts[f"crash_{point}"] += text.count(f"SIGKILL at {point}")
        return +counts


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a worker's child processes, under isolation="process")."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def reproduce_command(seed: int, profile: Profile) -> str:
    pooled = f" --concurrency {profile.concurrency} --pool-size {profile.pool_size}" if profile.pool_size else ""
    return (
        f"python -m tests.chaos --first-seed {seed} --seeds 1 --jobs {profile.jobs} "
        f"--workers {profile.workers} --fault-seconds {profile.fault_seconds:g} --workflows {profile.workflows} "
        f"--failovers {profile.failovers}{pooled}"
    )
