"""python manage.py demo: the kill -9 proof, end to end, on real processes.

Starts the API (gunicorn), submits charge jobs over HTTP, lets a worker die by SIGKILL
after its charge committed and before it finalized, lets another worker take the job back
when the lease expires, and prints A, H, C, F for every job, read from PostgreSQL.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from charges.models import Charge, ChargeRequest
from reliableq.models import Attempt, Job, JobStatus, Outcome
from testproject import accounts, embedded, processes

LOG_DIR = processes.ROOT / ".pgdata" / "demo-logs"


class Command(BaseCommand):
    help = "Run the kill -9 demo: a worker dies mid-charge; the job still charges once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=int, default=3, help="Charge jobs to submit (default 3).")
        parser.add_argument("--lease-seconds", type=float, default=3.0, help="Worker lease (default 3).")
        parser.add_argument("--timeout", type=float, default=90.0, help="Give up after this many seconds.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["jobs"] < 1:
            raise CommandError("--jobs must be at least 1.")
        self.started: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        try:
            ok = self.run_demo(options)
        finally:
            self.cleanup()
        if not ok:
            raise CommandError("The counts are not what the guarantee promises; see above.")

    def say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def spawn(self, name: str, start: Any, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        log = (LOG_DIR / f"{name}.log").open("wb")
        self.logs.append(log)
        process = start(*args, log=log, **kwargs)
        self.started.append(process)
        return process

    def run_demo(self, options: dict[str, Any]) -> bool:
        db = settings.DATABASES["default"]
        where = "embedded PostgreSQL 18" if not db.get("PORT") and str(db.get("HOST", "")).startswith("/") else "DATABASE_URL"
        self.say(f"1. database: {where} ({db.get('HOST')}); migrating")
        call_command("migrate", verbosity=0)
        token = self.api_token()
        queue = f"demo-{uuid.uuid4().hex[:8]}"
        port = processes.free_port()
        base = f"http://127.0.0.1:{port}"
        lease = options["lease_seconds"]
        common = dict(
            CHARGES_SERVICE_URL=base,
            CHARGES_SERVICE_TOKEN=token,
            RELIABLEQ_BACKOFF_BASE_SECONDS="0.2",
            RELIABLEQ_BACKOFF_MAX_SECONDS="1",
            RELIABLEQ_POLL_SECONDS="0.2",
        )

        self.say(f"2. starting the API and charge service (gunicorn) on {base}")
        api = self.spawn("api", processes.start_api, port, env=processes.child_env(**common))
        processes.wait_http(f"{base}/v1/schema", process=api)

        self.say(f"3. starting worker-A with a fault: SIGKILL itself after the charge commits, before finalizing "
                 f"(lease {lease:g}s, queue {queue})")
        worker_a = self.spawn(
            "worker-A", processes.start_worker,
            ["--queues", queue, "--concurrency", "1", "--lease-seconds", str(lease), "--worker-id", "worker-A"],
            env=processes.child_env(**common, RELIABLEQ_FAULT_INJECTION="1",
                                    RELIABLEQ_CRASH_AT="after_effect_before_finalize"),
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
            raise CommandError(f"worker-A exited with {worker_a.returncode}, not by SIGKILL; see {LOG_DIR}/worker-A.log")
        charged = Charge.objects.filter(idempotency_key=killed.effect_key).exists()
        self.say(f"5. worker-A died by SIGKILL mid-job: job {killed.id} is {killed.status} with attempt 1 open; "
                 f"its charge {'IS' if charged else 'is NOT'} committed")
        killed_at = time.monotonic()

        self.say("6. starting worker-B and worker-C (no faults); the job comes back when worker-A's lease expires")
        for name in ("worker-B", "worker-C"):
            self.spawn(
                name, processes.start_worker,
                ["--queues", queue, "--concurrency", "2", "--lease-seconds", str(lease), "--worker-id", name],
                env=processes.child_env(**common),
            )
        while Job.objects.filter(id__in=ids).exclude(status__in=[JobStatus.SUCCEEDED, JobStatus.DEAD]).exists():
            if time.monotonic() > deadline:
                raise CommandError("The jobs did not settle in time; see the logs in " + str(LOG_DIR))
            time.sleep(0.1)
        recovered = Attempt.objects.get(job_id=killed.id, number=2)
        self.say(f"7. {recovered.worker_id} took job {killed.id} back and finished it "
                 f"{time.monotonic() - killed_at:.1f}s after the kill (lease {lease:g}s)")
        return self.report(ids, killed.id)

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
            self.say(f"   {str(job.id):36}  {job.status:9}  {a}  {h}  {c}  {f}{mark}")
            expected = (2, 2, 1, 1) if job.id == killed_id else (1, 1, 1, 1)
            ok = ok and (a, h, c, f) == expected and job.status == JobStatus.SUCCEEDED
        self.say("")
        if ok:
            self.say(self.style.SUCCESS(
                "The killed job: A=2, H=2, C=1, F=1. It ran twice; it charged once; it finalized once."))
        return ok

    def api_token(self) -> str:
        # Submits the charge jobs and is the charge job's service account: exactly those rights.
        return accounts.token_for("demo", *accounts.CLIENT_PERMISSIONS, is_staff=True)

    def submit(self, base: str, token: str, queue: str, n: int) -> uuid.UUID:
        body = {
            "kind": "charge",
            "queue": queue,
            "payload": {"amount": 1000 + n, "currency": "EUR", "description": f"demo order {n + 1}"},
        }
        request = urllib.request.Request(
            f"{base}/v1/jobs", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Token {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 202:
                raise CommandError(f"POST /v1/jobs answered {response.status}")
            return uuid.UUID(json.loads(response.read())["id"])

    def cleanup(self) -> None:
        for process in reversed(self.started):
            processes.stop(process)
        for log in self.logs:
            log.close()
        if embedded.started_here():
            embedded.stop()
            self.say("stopped the embedded PostgreSQL this demo started")
        self.say(f"all processes stopped; logs in {LOG_DIR}")


