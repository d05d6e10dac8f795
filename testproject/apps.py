import json
import os
from typing import Any

from django.apps import AppConfig


class TestprojectConfig(AppConfig):
    name = "testproject"
    verbose_name = "ReliableQ test project"

    def ready(self) -> None:
        # The Tasks tests read the signals a worker sent from this file (TESTPROJECT_TASK_SIGNALS).
        if os.environ.get("TESTPROJECT_TASK_SIGNALS"):
            from reliableq.tasks_compat import task_finished, task_started

            task_started.connect(_record("task_started"), weak=False)
            task_finished.connect(_record("task_finished"), weak=False)
        # ReliableQ's own signals, likewise (TESTPROJECT_JOB_SIGNALS).
        if os.environ.get("TESTPROJECT_JOB_SIGNALS"):
            from reliableq import signals

            for name in ("job_enqueued", "job_started", "job_finished"):
                getattr(signals, name).connect(_record_fields(name), weak=False)
        # An OpenTelemetry SDK exporting every span of this process to a file (TESTPROJECT_OTEL_FILE).
        if os.environ.get("TESTPROJECT_OTEL_FILE"):
            from testproject import otel

            otel.export_to(os.environ["TESTPROJECT_OTEL_FILE"])


def _record_fields(name: str) -> Any:
    def receive(sender: Any, **fields: Any) -> None:
        line = {"signal": name, "pid": os.getpid(), **{k: str(v) for k, v in fields.items() if k != "signal"}}
        if name == "job_finished":  # what a receiver reads then: the finish has committed
            from reliableq.models import Attempt

            # The attempt's own row: only its finish sets its outcome. The job's status may have moved
            # on already (a retry with a near-zero jittered delay is claimed again at once).
            attempt = Attempt.objects.get(job_id=fields["job_id"], number=fields["attempt"])
            line["committed_outcome"] = attempt.outcome
        with open(os.environ["TESTPROJECT_JOB_SIGNALS"], "a") as out:
            out.write(json.dumps(line) + "\n")

    return receive


def _record(name: str) -> Any:
    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        line = {
            "signal": name,
            "id": task_result.id,
            "status": str(task_result.status),
            "errors": [e.exception_class_path for e in task_result.errors],
            "attempts": task_result.attempts,
            "sender": sender.__name__,
        }
        with open(os.environ["TESTPROJECT_TASK_SIGNALS"], "a") as out:
            out.write(json.dumps(line) + "\n")

    return receive
