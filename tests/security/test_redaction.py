"""Attack 5: secrets kept in stored errors, and task tracebacks with server paths shown to anyone."""

from __future__ import annotations

import sys

import pytest
from django.db import connection

import reliableq
from reliableq.models import Attempt, Job, JobStatus
from testproject.tasks import explode

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl"
# What the review found kept, each with the secret part that must not survive.
LEAKS = {
    "private_key=MIIEvQIBADANBgkqhkiG9w0": "MIIEvQIBADANBgkqhkiG9w0",
    f"upstream said: token expired, {JWT}": JWT,
    "passphrase=correct-horse-battery": "correct-horse-battery",
    "credentials=svc:Zk9vYmFy": "svc:Zk9vYmFy",
    "proxy answered 407 for Basic dXNlcjpwYXNzd29yZA==": "dXNlcjpwYXNzd29yZA==",
    "password=p@ss w0rd was refused": "w0rd",
}


def test_secrets_in_a_handlers_error_never_reach_the_database_or_the_api(client_of, spawn_worker):
    operator = client_of("olga", "reliableq.view_job")
    jobs = {message: reliableq.enqueue("test.fail_with", {"message": message}) for message in LEAKS}
    worker = spawn_worker("--burst")
    assert worker.wait(timeout=60) == 0, worker.output()[-2000:]

    for message, secret in LEAKS.items():
        job = Job.objects.get(pk=jobs[message].id)
        assert job.status == JobStatus.DEAD
        stored = [job.last_error, *Attempt.objects.filter(job=job).values_list("error", flat=True)]
        assert all(secret not in text and "[redacted]" in text for text in stored), stored
        shown = operator.request("GET", f"/v1/jobs/{job.id}").json()  # (the payload is the caller's own input)
        assert all(secret not in text for text in [shown["last_error"], *(a["error"] for a in shown["attempts"])])
    assert not any(secret in worker.output() for secret in LEAKS.values()), "the worker's log repeats a secret"


def test_task_tracebacks_are_kept_for_operators_without_server_paths(client_of, spawn_worker):
    operator = client_of("olga", "reliableq.view_job")
    result = explode.enqueue("boom password=hunter2")
    Job.objects.filter(pk=result.id).update(max_attempts=1)
    worker = spawn_worker("--burst", "--queues", "default")
    assert worker.wait(timeout=60) == 0, worker.output()[-2000:]

    job = Job.objects.get(pk=result.id)
    assert job.status == JobStatus.DEAD
    [attempt] = Attempt.objects.filter(job=job)
    assert attempt.traceback.startswith("Traceback (most recent call last)"), "operators keep the traceback"
    assert attempt.traceback.endswith("ValueError: boom password=[redacted]\n"), attempt.traceback
    assert "hunter2" not in attempt.traceback + job.last_error
    for root in {sys.prefix, str(connection.settings_dict.get("NAME", "")), "/work/", "/root/", "/home/"}:
        assert f'File "{root}' not in attempt.traceback, (root, attempt.traceback)
    shown = operator.request("GET", f"/v1/jobs/{job.id}").json()
    assert shown["attempts"][0]["traceback"] == attempt.traceback


def test_a_submitter_without_view_job_sees_errors_without_the_traceback(client_of):
    submitter = client_of("sam", "reliableq.submit_job")
    job = submitter.submit({"kind": "demo.noop", "payload": {}}, key="mine").json()
    trace = 'TaskFailed: builtins.ValueError: boom\nTraceback (most recent call last):\n  File "app/tasks.py", line 3'
    Job.objects.filter(pk=job["id"]).update(last_error=trace)

    again = submitter.submit({"kind": "demo.noop", "payload": {}}, key="mine")

    assert again.status_code == 200
    assert again.json()["last_error"] == "TaskFailed: builtins.ValueError: boom"
    assert "Traceback" not in again.text and "app/tasks.py" not in again.text
