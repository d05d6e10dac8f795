"""python manage.py demo: the kill -9 proof, end to end, on real processes.

Starts the API (gunicorn), submits charge jobs over HTTP, lets a worker die by SIGKILL
after its charge committed and before it finalized, lets another worker take the job back
when the lease expires, and prints A, H, C, F for every job, read from PostgreSQL.

With --serve it then keeps the API and admin up with one worker, and leaves DEAD jobs, a
backlog and an operator account to log in with (testproject/tour.py), until Ctrl-C.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from charges.models import Charge, ChargeRequest
from reliableq.models import Attempt, Job, JobStatus, Outcome
from testproject import accounts, embedded, processes, tour

LOG_DIR = processes.ROOT / ".pgdata" / "demo-logs"


class Command(BaseCommand):
    help = "Run the kill -9 demo: a worker dies mid-charge; the job still charges once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=3, help="Charge jobs to submit (default 3).")
        parser.add_argument("--lease-seconds", type=float, default=3.0, help="Worker lease (default 3).")
        parser.add_argument("--timeout", type=float, default=90.0, help="Give up after this many seconds.")
        parser.add_argument(
            "--serve",
            action="store_true",
            help="Then keep the API, the admin and a worker running, with DEAD jobs to replay "
            "and an operator account, until Ctrl-C.",
        )
        parser.add_argument(
            "--port",
            type=int,
            default=None,
            help="The API's port: 8000 with --serve, else any free one (0: any free one).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["jobs"] < 1:
            raise CommandError("--jobs must be at least 1.")
        port = options["port"] if options["port"] is not None else 8000 if options["serve"] else 0
        options["port"] = port or processes.free_port()
        if not port_is_free(options["port"]):
            raise CommandError(
                f"Port {options['port']} is in use (another demo?). Pass --port N, or --port 0 for any free port."
            )
        self.started: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        # SIGTERM (kill, a CI runner) stops the children too, as Ctrl-C does.
        signal.signal(signal.SIGTERM, interrupt)
        ok = interrupted = False
        try:
            ok = self.run_demo(options)
            if ok and options["serve"]:
                self.serve(options)
        except KeyboardInterrupt:
            if not options["serve"]:
                raise
            interrupted = True
            self.say("")
            self.say("Ctrl-C: stopping everything the demo started")
        finally:
            # A second Ctrl-C must not cut the clean-up short and leave processes behind.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self.cleanup()
        if not ok and not interrupted:
            raise CommandError("The counts are not what the guarantee promises; see above.")

    def say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def spawn(self, name: str, start: Any, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        log = processes.private_log(LOG_DIR / f"{name}.log")
        self.logs.append(log)
        process = start(*args, log=log, **kwargs)
        self.started.append(process)
        return process

    def run_demo(self, options: dict[str, Any]) -> bool:
        db = settings.DATABASES["default"]
        where = (
            "embedded PostgreSQL 18"
            if not db.get("PORT") and str(db.get("HOST", "")).startswith("/")
            else "DATABASE_URL"
        )
        self.say(f"1. database: {where} ({db.get('HOST')}); migrating; collecting static files")
        call_command("migrate", verbosity=0)
        # What a deployment does: the admin's CSS and JS into STATIC_ROOT, which WhiteNoise serves.
        call_command("collectstatic", interactive=False, verbosity=0)
        token = accounts.token_for("demo", *accounts.SUBMITTER_PERMISSIONS, is_staff=True)
        service_token = accounts.token_for("charge-service", *accounts.CHARGE_SERVICE_PERMISSIONS)
        queue = f"demo-{uuid.uuid4().hex[:8]}"
        port = options["port"]
        base = f"http://127.0.0.1:{port}"
        lease = options["lease_seconds"]
        common = dict(
            CHARGES_SERVICE_URL=base,
            CHARGES_SERVICE_TOKEN=service_token,
            RELIABLEQ_HTTP_QUEUES=json.dumps([queue]),  # this run's queue, and only it, open to HTTP
            RELIABLEQ_BACKOFF_BASE_SECONDS="0.2",
            RELIABLEQ_BACKOFF_MAX_SECONDS="1",
            RELIABLEQ_POLL_SECONDS="0.2",
        )

        self.say(f"2. starting the API and charge service (gunicorn) on {base}")
        api = self.spawn("api", processes.start_api, port, env=processes.child_env(**common))
        processes.wait_http(f"{base}/v1/schema", process=api)

        self.say(
            f"3. starting worker-A with a fault: SIGKILL itself after the charge commits, before finalizing "
            f"(lease {lease:g}s, queue {queue})"
        )
        worker_a = self.spawn(
            "worker-A",
            processes.start_worker,
            ["--queues", queue, "--concurrency", "1", "--lease-seconds", str(lease), "--worker-id", "worker-A"],
            env=processes.child_env(
                **common, RELIABLEQ_FAULT_INJECTION="1", RELIABLEQ_CRASH_AT="after_effect_before_finalize"
            ),
        )

        self.say(f"4. submitting {options['jobs']} charge job(s) with POST {base}/v1/jobs")
        ids = [self.submit(base, token, queue, n) for n in range(options["jobs"])]

        deadline = time.monotonic() + options["timeout"]
        while worker_a.poll() is None:
            if time.monotonic() > deadline:
                raise CommandError("worker-A never reached its crash point.")
            time.sleep(0.05)
        killed = Job.objects.filter(queue=queue, worker_id="worker-A").first()
        if worker_a.returncode != -signal.SIGKILL or killed is None:
            raise CommandError(
                f"worker-A exited with {worker_a.returncode}, not by SIGKILL; see {LOG_DIR}/worker-A.log"
            )
        charged = Charge.objects.filter(idempotency_key=killed.effect_key).exists()
        self.say(
            f"5. worker-A died by SIGKILL mid-job: job {killed.id} is {killed.status} with attempt 1 open; "
            f"its charge {'IS' if charged else 'is NOT'} committed"
        )
        killed_at = time.monotonic()

        self.say("6. starting worker-B and worker-C (no faults); the job comes back when worker-A's lease expires")
        self.proof_workers = [
            self.spawn(
                name,
                processes.start_worker,
                ["--queues", queue, "--concurrency", "2", "--lease-seconds", str(lease), "--worker-id", name],
                env=processes.child_env(**common),
            )
            for name in ("worker-B", "worker-C")
        ]
        self.api, self.base, self.common = api, base, common
        while Job.objects.filter(id__in=ids).exclude(status__in=[JobStatus.SUCCEEDED, JobStatus.DEAD]).exists():
            if time.monotonic() > deadline:
                raise CommandError("The jobs did not settle in time; see the logs in " + str(LOG_DIR))
            time.sleep(0.1)
        recovered = Attempt.objects.get(job_id=killed.id, number=2)
        self.say(
            f"7. {recovered.worker_id} took job {killed.id} back and finished it "
            f"{time.monotonic() - killed_at:.1f}s after the kill (lease {lease:g}s)"
        )
        return self.report(ids, killed.id)

    def serve(self, options: dict[str, Any]) -> None:
        """Keep the API and admin up with one worker, and leave work for an operator, until Ctrl-C."""
        for process in self.proof_workers:
            processes.stop(process)
        self.say("")
        self.say(f"8. the tour: worker-B and worker-C stopped; starting tour-worker on queue '{tour.WORK_QUEUE}'")
        worker = self.spawn(
            "tour-worker",
            processes.start_worker,
            ["--queues", tour.WORK_QUEUE, "--concurrency", "4", "--worker-id", "tour-worker"],
            env=processes.child_env(**self.common),
        )
        self.say(f"9. enqueueing on '{tour.WORK_QUEUE}' (some kinds fail on purpose):")
        ids = tour.submit_work(self.say)
        try:
            tour.wait_settled(ids, timeout=options["timeout"])
        except TimeoutError as exc:
            raise CommandError(f"{exc}; see {LOG_DIR}/tour-worker.log") from None
        dead = tour.dead_jobs(ids)
        self.say(
            f"10. tour-worker ran them all: {len(ids) - len(dead)} SUCCEEDED, {len(dead)} DEAD, each with its attempts:"
        )
        for job in dead:
            self.say(f"    {job.kind:18} {job.attempts} attempt(s)  {self.base}/admin/reliableq/job/{job.id}/change/")
        backlog = tour.fill_backlog()
        self.say(
            f"11. {len(backlog)} jobs wait on queue '{tour.IDLE_QUEUE}', which no worker serves "
            f"(a backlog, as a paused queue's)"
        )
        dead_before, waiting_before = tour.earlier([*ids, *backlog])
        if dead_before or waiting_before:
            fresh = " (stop the demo and remove .pgdata/ for a fresh start)" if embedded.started_here() else ""
            self.say(
                f"    the database also holds what earlier runs left, which the admin lists too: "
                f"{dead_before} more DEAD job(s), {waiting_before} more waiting on '{tour.IDLE_QUEUE}'{fresh}"
            )
        username, password = tour.operator_account()
        self.say(
            "12. operator account made: staff, not superuser; may view, replay and cancel jobs, "
            "pause queues, view charges"
        )
        self.announce(username, password)
        self.keep_running(worker)

    def announce(self, username: str, password: str) -> None:
        admin = f"{self.base}/admin/"
        self.say("")
        self.say(self.style.SUCCESS(f"The admin is up: {admin}"))
        self.say(f"  user:      {username}")
        self.say(f"  password:  {password}")
        self.say(f"  DEAD jobs: {admin}reliableq/job/?status__exact=DEAD")
        self.say(f"  dashboard: {admin}reliableq/queuedashboard/")
        self.say("Open a DEAD test.flaky job, read its three failed attempts and press Replay: tour-worker runs it")
        self.say(
            f"again and it succeeds. Every {tour.TRICKLE_SECONDS:g} s one more job runs on '{tour.WORK_QUEUE}' "
            f"and one more waits on '{tour.IDLE_QUEUE}'."
        )
        self.say(
            "Ctrl-C stops the server and the worker"
            + (", and the embedded PostgreSQL this demo started." if embedded.started_here() else ".")
        )

    def keep_running(self, worker: subprocess.Popen[bytes]) -> None:
        """Watch the server and the worker, and trickle new jobs in, until Ctrl-C."""
        next_tick = time.monotonic() + tour.TRICKLE_SECONDS
        while True:
            for name, process in (("the API server", self.api), ("tour-worker", worker)):
                if process.poll() is not None:
                    raise CommandError(f"{name} exited with {process.returncode}; see the logs in {LOG_DIR}")
            if time.monotonic() >= next_tick:
                tour.trickle()
                next_tick += tour.TRICKLE_SECONDS
            time.sleep(0.5)

    def report(self, ids: list[uuid.UUID], killed_id: uuid.UUID) -> bool:
        self.say("")
        self.say("   A = attempts, H = handler runs that reached the charge service,")
        self.say("   C = committed charges, F = successful finalizations (read from PostgreSQL)")
        self.say("")
        self.say(f"   {'job':36}  {'status':9}  A  H  C  F")
        ok = True
        for job in Job.objects.filter(id__in=ids).order_by("created_at"):
            a = job.attempts
            h = ChargeRequest.objects.filter(idempotency_key=job.effect_key).count()
            c = Charge.objects.filter(idempotency_key=job.effect_key).count()
            f = Attempt.objects.filter(job=job, outcome=Outcome.SUCCEEDED).count()
            mark = "  <- worker-A was killed running this one" if job.id == killed_id else ""
            self.say(f"   {job.id!s:36}  {job.status:9}  {a}  {h}  {c}  {f}{mark}")
            expected = (2, 2, 1, 1) if job.id == killed_id else (1, 1, 1, 1)
            ok = ok and (a, h, c, f) == expected and job.status == JobStatus.SUCCEEDED
        self.say("")
        if ok:
            self.say(
                self.style.SUCCESS(
                    "The killed job: A=2, H=2, C=1, F=1. It ran twice; it charged once; it finalized once."
                )
            )
        return ok

    def submit(self, base: str, token: str, queue: str, n: int) -> uuid.UUID:
        body = {
            "kind": "charge",
            "queue": queue,
            "payload": {"amount": 1000 + n, "currency": "EUR", "description": f"demo order {n + 1}"},
        }
        request = urllib.request.Request(
            f"{base}/v1/jobs",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Token {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 202:
                raise CommandError(f"POST /v1/jobs answered {response.status}")
            return uuid.UUID(json.loads(response.read())["id"])

    def cleanup(self) -> None:
        cleanup(self.started, self.logs, self.say)


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def interrupt(signum: int, frame: FrameType | None) -> None:
    """Handle SIGTERM as Ctrl-C: unwind through the clean-up that stops the children."""
    raise KeyboardInterrupt


def cleanup(started: list[Any], logs: list[Any], say: Any) -> None:
    """Stop what a demo started (its processes, newest first, and the embedded PostgreSQL if it
    started it) and close its logs."""
    for process in reversed(started):
        processes.stop(process)
    for log in logs:
        log.close()
    if embedded.started_here():
        embedded.stop()
        say("stopped the embedded PostgreSQL this demo started")
    say(f"all processes stopped; logs in {LOG_DIR}")
