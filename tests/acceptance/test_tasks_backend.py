"""Django Tasks on ReliableQ, used as a Django user uses them: @task, .enqueue(), get_result(), refresh()."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from reliableq import db
from reliableq.backends import KIND, task_kind
from reliableq.models import Job, JobStatus
from reliableq.tasks_compat import TaskResultDoesNotExist, TaskResultStatus, task_backends
from testproject.tasks import add, async_double, explode, report, which_attempt

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ENV: dict[str, str] = {}


def run_burst(spawn_worker) -> None:
    worker = spawn_worker("--burst", "--queues", "default,reports", env=ENV)
    assert worker.wait(timeout=60) == 0, worker.output()[-2000:]


def test_enqueued_tasks_run_on_a_worker_and_their_results_come_back(spawn_worker):
    result = add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY and result.backend == "default"
    # A job like any other (leases, fencing, retries), of the task's own kind.
    assert Job.objects.get(pk=result.id).kind == task_kind(add) == f"{KIND}:testproject.tasks.add"
    doubled = async_double.enqueue(21)
    context = which_attempt.enqueue()
    run_burst(spawn_worker)

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1 and result.worker_ids == ["w1"]
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert add.get_result(result.id).return_value == 5
    assert async_double.get_result(doubled.id).return_value == 42
    assert which_attempt.get_result(context.id).return_value == 1


def test_priority_queue_and_run_after_map_onto_the_job(spawn_worker):
    later = timezone.now() + dt.timedelta(hours=1)
    deferred = add.using(run_after=later).enqueue(1, 1)
    urgent = report.enqueue("weekly")  # queue "reports", priority 10
    job = Job.objects.get(pk=urgent.id)
    assert (job.queue, job.priority) == ("reports", -10)  # Django: higher first; ReliableQ: lower first
    assert Job.objects.get(pk=deferred.id).run_at == later
    run_burst(spawn_worker)
    assert report.get_result(urgent.id).return_value == {"report": "weekly"}
    assert add.get_result(deferred.id).status == TaskResultStatus.READY  # not due yet


def test_a_failing_task_is_retried_then_reported_failed_with_its_errors(spawn_worker):
    with override_settings(RELIABLEQ={**settings.RELIABLEQ, "MAX_ATTEMPTS": 2}):  # the budget is fixed at enqueue
        result = explode.enqueue("boom")
    run_burst(spawn_worker)
    while Job.objects.get(pk=result.id).status != JobStatus.DEAD:  # a retry may wait out its backoff
        run_burst(spawn_worker)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    assert result.errors[0].exception_class is ValueError
    assert "boom" in result.errors[0].traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_a_task_enqueued_in_a_rolled_back_transaction_never_exists():
    with pytest.raises(RuntimeError), transaction.atomic(using=db.alias()):  # the queue's database
        result = add.enqueue(1, 2)
        raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(result.id)
    assert not Job.objects.exists()


def test_the_backend_refuses_what_it_cannot_honour():
    backend = task_backends["default"]
    assert backend.supports_defer and backend.supports_priority and backend.supports_get_result
    assert backend.supports_async_task
    with pytest.raises(Exception, match="Queue"):
        add.using(queue_name="nowhere").enqueue(1, 2)
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("not-a-uuid")
    with pytest.raises(TypeError):
        add.enqueue(object(), 1)


def test_a_job_of_the_older_shared_kind_still_runs_its_registered_task(spawn_worker):
    """Jobs enqueued before tasks had kinds of their own (kind `django.task`) keep running."""
    import reliableq

    job = reliableq.enqueue(KIND, {"task": add.module_path, "args": [20, 22], "kwargs": {}, "backend": "default"})
    run_burst(spawn_worker)
    assert add.get_result(str(job.id)).return_value == 42
