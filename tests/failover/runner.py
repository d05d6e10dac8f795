"""One failover run: a primary and a standby, the API and workers on both hosts, load, a crash, a promote.

    run = FailoverRun(pair, lease_seconds=3, log_dir=tmp_path)
    run.start()                      # migrated, emptied; gunicorn, two workers, the enqueuer, HTTP load
    run.fail_over()                  # pg_ctl stop -m immediate on the primary, promote the standby
    outcome = run.finish()           # load stopped, every acknowledged job waited for, then counted

What it counts is what a client was told: a job is acknowledged by a 202 (or 200) of POST
/v1/jobs, or by the enqueuer's `ok <id>` once its transaction committed; a charge by the charge
service's 201 (or 200), read from gunicorn's access log with its Idempotency-Key; a finish by the
worker's `job=<id> attempt=<n> succeeded` line, which the completer logs (at DEBUG) only after
the finish committed. After the failover the new primary is asked which of them it has.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
import re
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

from testproject import dburl, processes
from tests.chaos.invariants import Report, check

from .pair import Pair

ROOT = processes.ROOT
DATA_DIR = ROOT / ".pgdata" / "failover"
CONCURRENCY = 4
HTTP_KINDS = (
    ("demo.noop", {}),
    ("test.sleep", {"seconds": 0.5}),
    ("charge", {"currency": "EUR"}),
    ("test.async_echo", {"seconds": 0.1}),
)
TABLES = (
    "reliableq_attempt, reliableq_job, reliableq_queuestate, reliableq_ratewindow, reliableq_leader, "
    "reliableq_workflow, reliableq_workflowedge, reliableq_workflowcount, "
    "reliableq_worker, charges_charge, charges_chargerequest, charges_servicefault, authtoken_token, "
    "auth_user_user_permissions, auth_user"
)
FINISHED = re.compile(r"job=([0-9a-f-]{36}) attempt=(\d+) succeeded")
ACCESS_FORMAT = "%(m)s %(U)s %(s)s key=%({idempotency-key}i)s"
CHARGE_ACK = re.compile(r"^POST /v1/charges (200|201) key=(\S+)$", re.M)


WORKFLOW_EVERY = 25  # one submission in so many is a workflow


def workflow_body(n: int) -> dict[str, Any]:
    """A fan-out and fan-in of wf.step members, with every callback."""
    members = [{"name": "fetch", "kind": "wf.step", "payload": {}}]
    members += [{"name": f"load-{i}", "kind": "wf.step", "payload": {"seconds": 0.1}, "after": ["fetch"]}
                for i in range(4)]  # fmt: skip
    members.append({"name": "report", "kind": "wf.step", "payload": {}, "after": [f"load-{i}" for i in range(4)]})
    callbacks = {event: {"kind": "wf.callback", "payload": {"event": event}} for event in ("success", "complete")}
    return {"name": f"failover {n}", "members": members, "callbacks": callbacks}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass
class Failover:
    killed_at: dt.datetime
    promoted_at: dt.datetime = field(default_factory=utcnow)
    lag_bytes: int = 0  # how far the standby's replay was behind the primary just before the crash
    marked: dict[str, str] = field(default_factory=dict)  # worker -> what its health file said during the gap
    first_claim_at: dt.datetime | None = None
    in_flight: int = 0  # jobs running when the primary crashed
    in_flight_done_at: dt.datetime | None = None  # when the last of them finished
    expired: int = 0  # their attempts that ended LEASE_EXPIRED or LEASE_LOST: the jobs ran again

    def since_promote(self, at: dt.datetime | None) -> float | None:
        return None if at is None else (at - self.promoted_at).total_seconds()

    @property
    def resume_seconds(self) -> float | None:
        """From the promote to the first job claimed on the new primary."""
        if self.first_claim_at is None:
            return None
        return (self.first_claim_at - self.promoted_at).total_seconds()


@dataclass
class Outcome:
    synchronous: bool
    lease_seconds: float
    failovers: list[Failover] = field(default_factory=list)
    acked_jobs: int = 0  # 202/200 and committed enqueues
    acked_charges: int = 0
    acked_finishes: int = 0
    missing_jobs: list[str] = field(default_factory=list)  # acknowledged, absent from the new primary
    missing_charges: list[str] = field(default_factory=list)
    lost_finishes: list[str] = field(default_factory=list)  # a success committed, not the new primary's record
    unfinished: list[str] = field(default_factory=list)  # jobs neither SUCCEEDED nor DEAD once settled
    exited: list[str] = field(default_factory=list)  # workers (and the API) that exited on their own
    statuses: Counter[str] = field(default_factory=Counter)
    report: Report = field(default_factory=Report)
    logs: dict[str, str] = field(default_factory=dict)  # worker name -> its log
    answers: Counter[int] = field(default_factory=Counter)  # POST /v1/jobs answers by status, retries included

    def summary(self) -> str:
        resumes = ", ".join(f"{f.resume_seconds:.2f}s" if f.resume_seconds is not None else "never"
                            for f in self.failovers)  # fmt: skip
        return (
            f"{'sync' if self.synchronous else 'async'} lease {self.lease_seconds:g}s, {len(self.failovers)} "
            f"failover(s): resumed after {resumes}; acknowledged {self.acked_jobs} jobs, {self.acked_charges} "
            f"charges, {self.acked_finishes} finishes; lost {len(self.missing_jobs)} jobs, "
            f"{len(self.missing_charges)} charges, {len(self.lost_finishes)} finishes; statuses {dict(self.statuses)}"
        )


class FailoverRun:
    def __init__(
        self,
        pair: Pair,
        *,
        lease_seconds: float,
        log_dir: Path,
        workers: int = 2,
        http_rate: float = 20.0,
        enqueue_pause: float = 0.05,
        say: Any = print,
    ) -> None:
        self.pair = pair
        self.lease_seconds = lease_seconds
        self.log_dir = log_dir
        self.worker_count = workers
        self.http_rate = http_rate
        self.enqueue_pause = enqueue_pause
        self.say = say
        self.rng = random.Random(0)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.api: subprocess.Popen[bytes] | None = None
        self.read_only_api: subprocess.Popen[bytes] | None = None
        self.enqueuer: subprocess.Popen[bytes] | None = None
        self.failovers: list[Failover] = []
        self.http_acks: list[tuple[dt.datetime, str]] = []
        self._stop_load = threading.Event()
        self._load: threading.Thread | None = None
        self._files: list[Any] = []

    # -- setup ----------------------------------------------------------------------------

    def env(self, name: str, **more: Any) -> dict[str, str]:
        env = processes.child_env(
            DATABASE_URL=self.pair.url(application_name=f"rq-failover-{name}"),
            RELIABLEQ_LEASE_SECONDS=self.lease_seconds,
            RELIABLEQ_BACKOFF_BASE_SECONDS="0.05",
            RELIABLEQ_BACKOFF_MAX_SECONDS="0.5",
            RELIABLEQ_POLL_SECONDS="0.2",
            CHARGES_SERVICE_URL=self.base_url,
            CHARGES_SERVICE_TOKEN=self.token,
            RELIABLEQ_LOG_LEVEL="DEBUG",
            TESTPROJECT_SUBMIT_RATE="100000/s",
            **more,
        )
        for key in ("RELIABLEQ_CRASH_AT", "QUEUE_DATABASE_URL", "LISTEN_DATABASE_URL", "RELIABLEQ_TEST_DB"):
            env.pop(key, None)
        return env

    def prepare(self) -> None:
        """Migrate (once per pair), empty the tables, make the API user and its token."""
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=ROOT,
            check=True,
            env=processes.child_env(DATABASE_URL=self.pair.url()),
        )
        token = uuid.uuid4().hex[:40]
        with self.pair.connect() as conn:
            conn.execute(f"TRUNCATE {TABLES} CASCADE")
            (user_id,) = conn.execute(
                "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, is_staff,"
                " is_active, date_joined) VALUES ('!', false, 'failover', '', '', '', false, true, now()) RETURNING id"
            ).fetchone()  # type: ignore[misc]
            conn.execute("INSERT INTO authtoken_token (key, user_id, created) VALUES (%s, %s, now())", (token, user_id))
            conn.execute(
                "INSERT INTO auth_user_user_permissions (user_id, permission_id) SELECT %s, p.id"
                "  FROM auth_permission p JOIN django_content_type ct ON ct.id = p.content_type_id"
                " WHERE (ct.app_label, p.codename) IN (('charges', 'add_charge'), ('reliableq', 'submit_job'))",
                (user_id,),
            )
            conn.execute(
                "INSERT INTO charges_servicefault (id, delay_seconds, unavailable_rate, no_answer_rate) "
                "VALUES (1, 0, 0, 0)"
            )
        self.token = token

    def _log(self, name: str) -> Any:
        handle = processes.private_log(self.log_dir / f"{name}.log")
        self._files.append(handle)
        return handle

    def standby_url(self, name: str) -> str:
        """A URL to the standby alone, with no target_session_attrs: a client that reached a read-only
        server (a DNS name not yet moved), and that finds it read-write once it is promoted."""
        node = self.pair.standby
        return dburl.build({"NAME": "postgres", "USER": "postgres", "HOST": "127.0.0.1", "PORT": str(node.port),
                            "OPTIONS": {"application_name": f"rq-failover-{name}"}})  # fmt: skip

    def start_read_only_clients(self) -> None:
        """A worker (r1) and an API server on the standby alone, before the failover promotes it."""
        port = processes.free_port()
        self.read_only_url = f"http://127.0.0.1:{port}"
        env = {**self.env("api-ro"), "DATABASE_URL": self.standby_url("api-ro")}
        self.read_only_api = subprocess.Popen(
            processes.api_argv(port, workers=1, threads=4), cwd=ROOT, env=env, stdout=self._log("api-ro"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        env = {**self.env("r1"), "DATABASE_URL": self.standby_url("r1")}
        self.workers["r1"] = processes.start_worker(
            ["--concurrency", str(CONCURRENCY), "--worker-id", "r1", "--grace-seconds", "2",
             "--health-file", str(self.log_dir / "r1.alive")],
            env=env,
            log=self._log("r1"),
        )  # fmt: skip
        processes.wait_http(f"{self.read_only_url}/v1/schema", process=self.read_only_api)

    def ask_read_only(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        """A request to the API server that started on the standby: (status, headers, body)."""
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.read_only_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")

    def start(self, *, read_only_clients: bool = False) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "access.log").unlink(missing_ok=True)  # gunicorn appends
        port = processes.free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        self.prepare()
        argv = [*processes.api_argv(port, workers=2, threads=8),
                "--access-logfile", str(self.log_dir / "access.log"), "--access-logformat", ACCESS_FORMAT]  # fmt: skip
        self.api = subprocess.Popen(
            argv, cwd=ROOT, env=self.env("api"), stdout=self._log("api"), stderr=subprocess.STDOUT
        )
        processes.wait_http(f"{self.base_url}/v1/schema", process=self.api)
        for n in range(1, self.worker_count + 1):
            name = f"f{n}"
            self.workers[name] = processes.start_worker(
                ["--concurrency", str(CONCURRENCY), "--worker-id", name, "--grace-seconds", "2",
                 "--health-file", str(self.log_dir / f"{name}.alive")],
                env=self.env(name),
                log=self._log(name),
            )  # fmt: skip
        self.enqueuer = subprocess.Popen(
            [sys.executable, "-m", "tests.failover.enqueuer", str(self.enqueue_pause)],
            cwd=ROOT,
            env=self.env("enqueuer"),
            stdout=self._log("enqueuer"),
            stderr=subprocess.STDOUT,
        )
        if read_only_clients:
            self.start_read_only_clients()
        self._load = threading.Thread(target=self._submit_over_http, name="failover-http-load", daemon=True)
        self._load.start()
        self._wait_for_load()

    def _wait_for_load(self, timeout: float = 120.0) -> None:
        """Until every worker has started and has finished jobs of the load: the fault must meet work."""
        deadline = time.monotonic() + timeout
        while True:
            logs = {name: (self.log_dir / f"{name}.log").read_text(errors="replace") for name in self.workers}
            if all(FINISHED.search(log) if name != "r1" else "database is unavailable" in log
                   for name, log in logs.items()):  # fmt: skip
                return
            for name, process in self.workers.items():
                if process.poll() is not None:
                    raise RuntimeError(f"worker {name} exited with {process.returncode} before the failover")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not start and finish jobs within {timeout:g}s")
            time.sleep(0.2)

    # -- load -----------------------------------------------------------------------------

    def _post(self, body: dict[str, Any], key: str, path: str = "/v1/jobs") -> tuple[int, Any]:
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        request = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), method="POST", headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()[:300]
        except OSError as exc:
            return 0, str(exc)

    def _submit_over_http(self) -> None:
        """Submit jobs one after another (and now and then a workflow); a refused or unanswered one is
        sent again, a job with the same Idempotency-Key."""
        rng = random.Random(1)
        for n in itertools.count():
            if self._stop_load.is_set():
                return
            kind, payload = rng.choice(HTTP_KINDS)
            if kind == "charge":
                payload = {**payload, "amount": rng.randrange(100, 100_000)}
            key, path, body = f"failover-http:{uuid.uuid4()}", "/v1/jobs", {"kind": kind, "payload": payload}
            if n % WORKFLOW_EVERY == 0:
                key, path, body = "", "/v1/workflows", workflow_body(n)
            while True:
                code, answer = self._post(body, key, path)
                if code in (200, 202):
                    now = utcnow()
                    ids = [m["id"] for m in answer["members"]] if "members" in answer else [answer["id"]]
                    self.http_acks.extend((now, job_id) for job_id in ids)
                    break
                if code not in (0, 429) and code < 500:
                    raise RuntimeError(f"POST {path} answered {code}: {answer!r}")
                if self._stop_load.wait(0.1):
                    return  # never acknowledged: not counted
            self._stop_load.wait(1.0 / self.http_rate)

    def stop_load(self) -> None:
        self._stop_load.set()
        if self._load is not None:
            self._load.join(timeout=60)
        if self.enqueuer is not None and self.enqueuer.poll() is None:
            self.enqueuer.send_signal(signal.SIGTERM)
            try:
                self.enqueuer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.enqueuer.kill()

    # -- the fault ------------------------------------------------------------------------

    def fail_over(self, *, gap: float = 0.0) -> Failover:
        """Crash the primary; for `gap` seconds only the read-only standby is up (the health files are
        read meanwhile); then promote the standby."""
        try:
            lag = self.pair.lag_bytes()
        except Exception:
            lag = -1
        failover = Failover(killed_at=utcnow(), lag_bytes=lag)
        self.pair.crash()
        until = time.monotonic() + gap
        if gap > 0 and self.api is not None:
            # One submission that meets the outage whatever the machine's load: answered before the promote.
            self._post({"kind": "demo.noop", "payload": {}}, f"failover-probe:{uuid.uuid4()}")
        while time.monotonic() < until:
            for name in self.workers:
                alive = self.log_dir / f"{name}.alive"
                try:
                    text = alive.read_text().strip()
                except OSError:
                    continue
                if text:
                    failover.marked.setdefault(name, text)
            time.sleep(0.05)
        self.pair.promote()
        failover.promoted_at = utcnow()
        self.failovers.append(failover)
        self.say(f"failover {len(self.failovers)}: {self.pair.primary.name} promoted")
        return failover

    # -- the end --------------------------------------------------------------------------

    def acked_jobs(self) -> set[str]:
        ids = {job_id for _, job_id in self.http_acks}
        text = (self.log_dir / "enqueuer.log").read_text(errors="replace")
        ids.update(re.findall(r"^ok ([0-9a-f-]{36})$", text, re.M))
        return ids

    def settle(self, timeout: float) -> None:
        """Wait until every job on the primary has finished and every worker that lost the database
        says it is back (its last parts may reconnect after the jobs ran out), or `timeout` passes
        (the count and the logs then say which not)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self.pair.connect() as conn:
                    (left,) = conn.execute(
                        "SELECT count(*) FROM reliableq_job WHERE status NOT IN ('SUCCEEDED', 'DEAD', 'CANCELLED')"
                    ).fetchone()  # type: ignore[misc]
                if left == 0 and self._all_back():
                    return
            except psycopg.OperationalError:  # a rebuilt node still starting: ask again
                pass
            time.sleep(0.2)

    def _all_back(self) -> bool:
        for name in self.workers:
            log = (self.log_dir / f"{name}.log").read_text(errors="replace")
            if log.count("the database is unavailable") > log.count("the database is back after"):
                return False
        return True

    def finish(self, *, settle_seconds: float = 90.0) -> Outcome:
        self.stop_load()
        acked = self.acked_jobs()
        outcome = Outcome(synchronous=self.pair.synchronous, lease_seconds=self.lease_seconds)
        try:
            self.settle(settle_seconds)
            outcome.exited = [name for name, p in self.workers.items() if p.poll() is not None]
            for name, api in (("api", self.api), ("api-ro", self.read_only_api)):
                if api is not None and api.poll() is not None:
                    outcome.exited.append(name)
        finally:
            self.shutdown()
        outcome.logs = {name: (self.log_dir / f"{name}.log").read_text(errors="replace") for name in self.workers}
        outcome.failovers = self.failovers
        self._count(outcome, acked)
        return outcome

    def _count(self, outcome: Outcome, acked: set[str]) -> None:
        access = (self.log_dir / "access.log").read_text(errors="replace")
        outcome.answers = Counter(int(code) for code in re.findall(r"^POST /v1/jobs (\d{3}) ", access, re.M))
        charges = set(CHARGE_ACK.findall(access))
        charge_keys = {key for _, key in charges}
        finishes = {(job_id, int(n)) for log in outcome.logs.values() for job_id, n in FINISHED.findall(log)}
        outcome.acked_jobs, outcome.acked_charges, outcome.acked_finishes = len(acked), len(charge_keys), len(finishes)
        with self.pair.connect() as conn:
            present = {str(row[0]) for row in conn.execute(
                "SELECT id FROM reliableq_job WHERE id = ANY(%s::uuid[])", [sorted(acked)])}  # fmt: skip
            outcome.missing_jobs = sorted(acked - present)
            kept = {row[0] for row in conn.execute(
                "SELECT idempotency_key FROM charges_charge WHERE idempotency_key = ANY(%s)",
                [sorted(charge_keys)])}  # fmt: skip
            outcome.missing_charges = sorted(charge_keys - kept)
            recorded = {(str(job_id), number) for job_id, number in conn.execute(
                "SELECT a.job_id, a.number FROM reliableq_attempt a"
                " WHERE a.outcome = 'SUCCEEDED' AND a.job_id = ANY(%s::uuid[])",
                [sorted({job_id for job_id, _ in finishes})])}  # fmt: skip
            outcome.lost_finishes = sorted(f"{job_id}#{n}" for job_id, n in finishes - recorded)
            outcome.unfinished = [str(row[0]) for row in conn.execute(
                "SELECT id FROM reliableq_job WHERE status NOT IN ('SUCCEEDED', 'DEAD')")]  # fmt: skip
            outcome.statuses = Counter(dict(conn.execute("SELECT status, count(*) FROM reliableq_job GROUP BY 1")))
            for failover in self.failovers:
                (failover.first_claim_at,) = conn.execute(
                    "SELECT min(started_at) FROM reliableq_attempt WHERE started_at > %s", [failover.promoted_at]
                ).fetchone()  # type: ignore[misc]
                failover.in_flight, failover.in_flight_done_at, failover.expired = conn.execute(
                    "SELECT count(DISTINCT j.id), max(j.finished_at),"
                    "       count(*) FILTER (WHERE a.outcome IN ('LEASE_EXPIRED', 'LEASE_LOST'))"
                    "  FROM reliableq_attempt a JOIN reliableq_job j ON j.id = a.job_id"
                    " WHERE a.started_at < %s AND (a.finished_at IS NULL OR a.finished_at > %s)",
                    [failover.killed_at, failover.killed_at],
                ).fetchone()  # type: ignore[misc]
            outcome.report = check(conn, concurrency=CONCURRENCY, lease_seconds=self.lease_seconds)

    def shutdown(self) -> None:
        self._stop_load.set()
        for process in [*self.workers.values(), self.api, self.read_only_api, self.enqueuer]:
            if process is not None:
                processes.stop(process)
        for handle in self._files:
            handle.close()
        self._files = []
