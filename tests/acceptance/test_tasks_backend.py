"""Django Tasks on ReliableQ, used as a Django user uses them: @task, .enqueue(), get_result(), refresh()."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from reliableq.backends import KIND, task_kind
from reliableq.models import Job, JobStatus
from reliableq.queue import db
from reliableq.tasks_compat import TaskResultDoesNotExist, TaskResultStatus, task_backends
from testproject.tasks import add, async_double, exits, explode, fails_once, report, which_attempt

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
        result.return_value


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


# -- Django Tasks as Django documents them (issue 33) ---------------------------------------------


def read_in_another_process(result_id: str, code: str, *, db_url: str) -> dict:
    """Run `code` (it has `result` = add.get_result(result_id)) in a fresh Django process; its printed JSON."""
    import json
    import subprocess
    import sys

    from tests.support import ROOT, worker_env

    script = (
        "import json, django; django.setup()\n"
        "from testproject.tasks import add\n"
        f"result = add.get_result({result_id!r})\n"
        f"print(json.dumps({code}, default=str))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**worker_env(db_url), "DJANGO_SETTINGS_MODULE": "testproject.settings"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_get_result_in_another_process_gives_back_the_task_as_using_made_it(db_url):
    """Before: read back with the module-level Task (priority 0, queue default, no run_after, backend
    default) while result.backend said `other`."""
    later = timezone.now().replace(microsecond=0) + dt.timedelta(hours=1)
    result = add.using(priority=7, queue_name="reports", run_after=later, backend="other").enqueue(1, 2)

    seen = read_in_another_process(
        result.id,
        "{'priority': result.task.priority, 'queue': result.task.queue_name, "
        "'run_after': result.task.run_after.isoformat(), 'backend': result.task.backend, 'of': result.backend}",
        db_url=db_url,
    )

    assert seen == {"priority": 7, "queue": "reports", "run_after": later.isoformat(), "backend": "other",
                    "of": "other"}  # fmt: skip
    assert add.get_result(result.id).task.priority == 7


def test_a_failed_tasks_traceback_is_pythons_own(spawn_worker):
    with override_settings(RELIABLEQ={**settings.RELIABLEQ, "MAX_ATTEMPTS": 1}):
        result = explode.enqueue("This task failed due to ValueError")
    run_burst(spawn_worker)
    result.refresh()

    [error] = result.errors
    assert error.traceback.startswith("Traceback (most recent call last):\n"), error.traceback
    assert error.traceback.endswith("ValueError: This task failed due to ValueError\n"), error.traceback
    assert 'File "testproject/tasks.py", line' in error.traceback  # paths relative to the project, not absolute
    # It points at the task's own line first, not at the backend's run_task that called it (issue 50).
    assert error.traceback.splitlines()[1].startswith('  File "testproject/tasks.py", line'), error.traceback
    assert "reliableq/" not in error.traceback, error.traceback


def test_task_finished_is_sent_once_with_the_finished_result(spawn_worker, tmp_path):
    """Before: sent after every attempt, with status RUNNING and no errors, even for a failed task."""
    import json

    signals_file = tmp_path / "signals.jsonl"
    ENV["TESTPROJECT_TASK_SIGNALS"] = str(signals_file)
    try:
        with override_settings(RELIABLEQ={**settings.RELIABLEQ, "MAX_ATTEMPTS": 2}):
            ok, failed, retried = add.enqueue(1, 1), explode.enqueue("boom"), fails_once.enqueue()
        run_burst(spawn_worker)
        while any(
            Job.objects.get(pk=r.id).status not in (JobStatus.SUCCEEDED, JobStatus.DEAD) for r in (failed, retried)
        ):
            run_burst(spawn_worker)  # a retry may wait out its backoff
    finally:
        ENV.pop("TESTPROJECT_TASK_SIGNALS")
    lines = [json.loads(line) for line in signals_file.read_text().splitlines()]
    finished = {line["id"]: line for line in lines if line["signal"] == "task_finished"}

    assert sorted(line["id"] for line in lines if line["signal"] == "task_finished") == sorted(
        [ok.id, failed.id, retried.id]
    ), lines  # once each, however many attempts
    assert finished[ok.id]["status"] == "SUCCESSFUL" and finished[ok.id]["errors"] == []
    assert finished[failed.id]["status"] == "FAILED" and finished[failed.id]["errors"] == ["builtins.ValueError"] * 2
    assert finished[retried.id]["status"] == "SUCCESSFUL" and finished[retried.id]["errors"] == ["builtins.ValueError"]
    assert {line["sender"] for line in lines} == {"ReliableQBackend"}
    started = [line for line in lines if line["signal"] == "task_started"]
    assert len(started) == 5 and {line["status"] for line in started} == {"RUNNING"}  # one per attempt


def test_system_exit_in_a_task_fails_it_with_its_own_class_and_traceback(spawn_worker):
    with override_settings(RELIABLEQ={**settings.RELIABLEQ, "MAX_ATTEMPTS": 1}):
        gone = exits.enqueue(3)
    after = add.enqueue(2, 2)
    run_burst(spawn_worker)
    gone.refresh()

    assert gone.status == TaskResultStatus.FAILED
    [error] = gone.errors
    assert error.exception_class_path == "builtins.SystemExit"
    assert error.exception_class is SystemExit
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert error.traceback.endswith("SystemExit: 3\n"), error.traceback
    assert add.get_result(after.id).return_value == 4  # the worker carried on
