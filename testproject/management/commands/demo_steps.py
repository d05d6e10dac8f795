"""python manage.py demo_steps: durable steps survive kill -9, on real processes.

Enqueues a three-step job (reserve, pack, ship), lets worker-A record the first two, SIGKILLs it
between the second and the third, lets worker-B take the job back when the lease expires, and
prints each step's runs, counted from PostgreSQL (testproject.StepRun, written as each step's
function starts), beside the attempt that recorded it (reliableq.Step).
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

import reliableq
from reliableq.models import Attempt, Job, JobStatus, Step, StepKind
from testproject import processes
from testproject.jobs import DEMO_STEPS
from testproject.models import StepRun

from .demo import LOG_DIR, cleanup, interrupt

KILL_AFTER = "pack"  # worker-A dies between this step and the next


class Command(BaseCommand):
    help = "Run the durable-steps demo: a worker dies between two steps; the job resumes after them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--lease-seconds", type=float, default=2.0, help="Worker lease (default 2).")
        parser.add_argument("--timeout", type=float, default=90.0, help="Give up after this many seconds.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.started: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, interrupt)  # stop the workers too, as Ctrl-C does
        try:
            ok = self.run_demo(options)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self.cleanup()
        if not ok:
            raise CommandError("The counts are not what the guarantee promises; see above.")

    def say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def worker(self, name: str, queue: str, lease: float) -> subprocess.Popen[bytes]:
        log = processes.private_log(LOG_DIR / f"steps-{name}.log")
        self.logs.append(log)
        args = ["--queues", queue, "--concurrency", "1", "--lease-seconds", f"{lease:g}", "--worker-id", name]
        process = processes.start_worker(args, env=processes.child_env(RELIABLEQ_POLL_SECONDS="0.2"), log=log)
        self.started.append(process)
        return process

    def run_demo(self, options: dict[str, Any]) -> bool:
        db = settings.DATABASES["default"]
        self.say(f"1. database: {db.get('HOST')}:{db.get('PORT') or ''} ({db.get('NAME')}); migrating")
        call_command("migrate", verbosity=0)
        lease, deadline = options["lease_seconds"], time.monotonic() + options["timeout"]
        queue = f"demo-steps-{uuid.uuid4().hex[:8]}"
        worker_a = self.worker("worker-A", queue, lease)
        job_id = reliableq.enqueue("demo.three_steps", {"pause_after": KILL_AFTER}, queue=queue).id
        self.say(f"2. worker-A started (lease {lease:g}s); enqueued demo.three_steps {job_id}: steps {DEMO_STEPS}")

        self.wait(lambda: Step.objects.filter(job_id=job_id, name=KILL_AFTER).exists(), deadline, "step pack")
        worker_a.send_signal(signal.SIGKILL)
        if worker_a.wait(timeout=10) != -signal.SIGKILL:
            raise CommandError(f"worker-A exited with {worker_a.returncode}, not by SIGKILL")
        recorded = list(
            Step.objects.filter(job_id=job_id, kind=StepKind.STEP).order_by("id").values_list("name", flat=True)
        )
        self.say(f"3. worker-A recorded {recorded} and was SIGKILLed before the next step began")

        killed_at = time.monotonic()
        self.worker("worker-B", queue, lease)
        self.say("4. worker-B started; it takes the job back once worker-A's lease has expired")
        self.wait(lambda: Job.objects.get(id=job_id).status == JobStatus.SUCCEEDED, deadline, "the job to finish")
        self.say(f"5. worker-B finished the job {time.monotonic() - killed_at:.1f}s after the kill")
        return self.report(job_id)

    def wait(self, done: Any, deadline: float, what: str) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise CommandError(f"Gave up waiting for {what}; see the logs in {LOG_DIR}")
            time.sleep(0.05)

    def report(self, job_id: uuid.UUID) -> bool:
        job = Job.objects.get(id=job_id)
        workers = dict(Attempt.objects.filter(job_id=job_id).values_list("number", "worker_id"))
        steps = {s.name: s.attempt for s in Step.objects.filter(job_id=job_id, kind=StepKind.STEP)}
        self.say("")
        self.say("   runs = times the step's function ran (testproject_steprun rows, read from PostgreSQL),")
        self.say("   recorded by = the attempt whose record of the step committed (reliableq_step)")
        self.say("")
        self.say(f"   {'step':8} runs  recorded by")
        ok = job.attempts == 2
        for name in DEMO_STEPS:
            runs = StepRun.objects.filter(job_id=job_id, step=name).count()
            attempt = steps.get(name)
            self.say(f"   {name:8} {runs:>4}  attempt {attempt} ({workers.get(attempt, '?')})")
            ok = ok and runs == 1 and attempt == (2 if name == "ship" else 1)
        self.say(f"   job {job.status}, {job.attempts} attempts, result {job.result}")
        self.say("")
        if ok:
            self.say(
                self.style.SUCCESS(
                    "Two attempts, each step once: the second attempt resumed after the steps the first recorded."
                )
            )
        return ok

    def cleanup(self) -> None:
        cleanup(self.started, self.logs, self.say)
