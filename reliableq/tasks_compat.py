"""Django's Tasks framework: django.tasks on Django 6, the django_tasks backport on Django 5.2."""

from __future__ import annotations

try:
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2: pip install django-tasks
    from django_tasks import task_backends  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[assignment, no-redef, unused-ignore]
    from django_tasks.utils import normalize_json  # type: ignore[assignment, no-redef, unused-ignore]

__all__ = [
    "BaseTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
