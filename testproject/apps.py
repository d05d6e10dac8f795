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
