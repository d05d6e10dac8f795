"""A Django Tasks backend on ReliableQ: @task functions get durable jobs, leases, fencing and retries.

    TASKS = {"default": {"BACKEND": "reliableq.backends.ReliableQBackend", "QUEUES": ["default", "emails"]}}

Each enqueued task is a job of its own kind, `django.task:<module path of the task>`, in the
caller's transaction, so per-kind limits, timeouts, admin filters and metrics tell tasks
apart. Django's priority (higher first, -100..100) becomes ours (lower first) by negation;
`run_after` becomes `run_at`. An exception is retried with backoff like any job until its
budget is spent, and the result reads FAILED only once the job is DEAD.

A worker runs only tasks registered through this backend, that is, Task objects created in a
module the process has imported (every installed app's tasks.py is imported at start). It
never imports a module path read from a job's payload.
"""

from __future__ import annotations

import inspect
import json
import logging
import uuid
from typing import Any

from django.utils.dateparse import parse_datetime

from . import registry, sanitize, services, signals
from .errors import TransientError
from .models import Attempt, Job, JobStatus
from .tasks_compat import (
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)

# A failed task's traceback starts at the task's own line, not at Task.call that ran it.
sanitize.calls_handlers(inspect.getfile(Task))

KIND = registry.TASKS_KIND  # jobs enqueued before tasks had kinds of their own
logger = logging.getLogger("reliableq.backends")
FINAL = {JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED}
# Every Task created for a ReliableQBackend, by module path: what a worker may run.
_tasks: dict[str, Task] = {}
STATUSES: dict[str, TaskResultStatus] = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


class TaskFailed(TransientError):
    """A task raised: retried like any transient error; the message carries the class path first.

    `original` is what the task raised: its traceback, as Python writes it (redacted), is the one
    the attempt stores and TaskError.traceback reads back.
    """

    def __init__(self, message: str, original: BaseException) -> None:
        super().__init__(message)
        self.original = original


def task_kind(task: Task) -> str:
    """The job kind of a task: `django.task:<module path>`."""
    return f"{KIND}:{task.module_path}"


def registered_task(path: str) -> Task:
    """The Task registered under this module path; UnknownKind if this process has none."""
    try:
        return _tasks[path]
    except KeyError:
        raise registry.UnknownKind(
            f"No task {path!r} is registered with the ReliableQ backend in this process "
            "(define it in an installed app's tasks.py, which workers import at start)."
        ) from None


class ReliableQBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        """Check the task as Django does, then register it: its kind, and the Task a worker may run.

        Django calls this when a @task is defined (and again for each .using() copy), so
        importing a module registers its tasks, and nothing else does.
        """
        super().validate_task(task)
        _tasks[task.module_path] = task
        registry.handler(task_kind(task), keep_return=True)(run_task)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        # What .using() set, so that get_result() (in any process) gives back the Task the result was
        # enqueued for, as Django documents TaskResult.task.
        using = {
            "priority": task.priority,
            "queue_name": task.queue_name,
            "run_after": task.run_after.isoformat() if task.run_after else None,
        }
        payload = {"task": task.module_path, "args": args, "kwargs": kwargs, "backend": self.alias, "using": using}
        try:
            json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"Task arguments must be JSON-serializable: {exc}") from None
        job = services.enqueue(
            task_kind(task), payload, queue=task.queue_name, priority=-task.priority, run_at=task.run_after
        )
        result = to_result(task, job, [], None)
        from .tasks_compat import task_enqueued

        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job = Job.objects.get(pk=uuid.UUID(str(result_id)))
        except (ValueError, Job.DoesNotExist):
            raise TaskResultDoesNotExist(result_id) from None
        if not registry.is_task_kind(job.kind):
            raise TaskResultDoesNotExist(result_id)
        return result_of(job)


def result_of(job: Job) -> TaskResult:
    """The TaskResult of a task's job, as stored now, for the Task it was enqueued as."""
    attempts = list(Attempt.objects.filter(job=job).order_by("number"))
    value = getattr(getattr(job, "return_value", None), "value", None)
    return to_result(enqueued_task(job.payload), job, attempts, value)


def enqueued_task(payload: dict[str, Any]) -> Task:
    """The registered Task with what .using() changed when it was enqueued (older jobs: the Task as defined)."""
    task = registered_task(payload["task"])
    using = payload.get("using")
    if not isinstance(using, dict):
        return task
    run_after = parse_datetime(using["run_after"]) if using.get("run_after") else None
    return task.using(
        priority=using.get("priority"),
        queue_name=using.get("queue_name"),
        run_after=run_after,
        backend=payload.get("backend"),
    )


def to_result(task: Task, job: Job, attempts: list[Attempt], value: Any) -> TaskResult:
    result: TaskResult = TaskResult(
        task=task,
        id=str(job.id),
        status=STATUSES[job.status],
        enqueued_at=job.created_at,
        started_at=attempts[0].started_at if attempts else None,
        finished_at=job.finished_at,
        last_attempted_at=attempts[-1].started_at if attempts else None,
        args=job.payload.get("args", []),
        kwargs=job.payload.get("kwargs", {}),
        backend=job.payload.get("backend", "default"),
        errors=[error for a in attempts if (error := task_error(a))],
        worker_ids=[a.worker_id for a in attempts],
    )
    if job.status == JobStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", value)
    return result


def task_error(attempt: Attempt) -> TaskError | None:
    """Read back how an attempt failed: the class path from its error ('TaskFailed: <class path>: ...'),
    the traceback as Python wrote it (Attempt.traceback)."""
    text = attempt.error
    if not text:
        return None
    head, _, rest = text.partition(": ")
    if head == TaskFailed.__name__:
        path, _, rest = rest.partition(": ")
        return TaskError(exception_class_path=path, traceback=attempt.traceback or rest)
    # Not raised by the task itself (a timeout, a lost lease, the worker's own failure): say what the
    # queue saw, as a class that exists.
    return TaskError(exception_class_path="builtins.Exception", traceback=attempt.traceback or text + "\n")


@registry.handler(KIND, keep_return=True)
def run_task(job: Any) -> Any:
    """Call the registered task with the enqueued arguments; its return value is stored when the job succeeds."""
    payload = job.payload
    path = payload.get("task")
    if not isinstance(path, str) or (job.kind != KIND and job.kind != f"{KIND}:{path}"):
        raise registry.UnknownKind(f"job {job.id} of kind {job.kind!r} does not name its task")
    task = enqueued_task(payload)  # never an import: unknown here is retried, as an unknown kind is
    backend = task_backends[payload.get("backend", "default")]
    row = Job.objects.get(pk=job.id)
    attempts = list(Attempt.objects.filter(job=row).order_by("number"))
    result = to_result(task, row, attempts, None)
    task_started.send(type(backend), task_result=result)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if task.takes_context:
        args = [TaskContext(task_result=result), *args]
    try:
        return normalize_json(task.call(*args, **kwargs))  # Task.call runs async functions to completion
    except BaseException as exc:  # SystemExit too: the task failed, the worker goes on
        kind = type(exc)
        raise TaskFailed(f"{kind.__module__}.{kind.__qualname__}: {exc}", exc) from None


@signals.on_ended
def _tasks_finished(ended: signals.Ended) -> None:
    """Django's task_finished, once per task, when its job has committed a final state, with that result."""
    for job_id, kind, status in ended:
        if status in FINAL and registry.is_task_kind(kind):
            try:  # one task's failing receiver must not cost the batch's other tasks their signal
                job = Job.objects.select_related("return_value").get(pk=job_id)
                result = result_of(job)
                task_finished.send(type(task_backends[result.backend]), task_result=result)
            except Exception:
                logger.exception("job=%s: sending task_finished raised", job_id)
