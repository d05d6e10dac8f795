"""Attack 1: a logged-in user runs a kind, a Tasks function or a charge of their choosing.

Each test sends what the review sent, over HTTP to a live gunicorn, and checks the refusal
and that nothing was made: no job, no charge, no import on a worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import reliableq
from charges.models import Charge
from reliableq import registry
from reliableq.models import Job, JobStatus

from .conftest import problem

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = "reliableq.submit_job"
TASK_ATTACK = {"kind": "django.task", "payload": {"task": "testproject.tasks.add", "args": [40, 2]}}


def test_a_user_without_submit_job_cannot_submit_anything(client_of):
    plain = client_of("plain", "reliableq.view_job", "reliableq.replay_job", "reliableq.cancel_job")
    for body in (
        {"kind": "demo.noop", "payload": {}},
        {"kind": "charge", "payload": {"amount": 5, "currency": "EUR"}},
        TASK_ATTACK,
    ):
        assert "reliableq.submit_job" in problem(plain.submit(body), 403)["detail"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("kind", ["django.task", "django.task:testproject.tasks.add"])
def test_django_tasks_are_never_accepted_over_http_even_with_submit_job(client_of, kind):
    attacker = client_of("attacker", SUBMIT)
    body = problem(attacker.submit({**TASK_ATTACK, "kind": kind}), 400)
    assert body["errors"]["kind"] == [f"Kind {kind!r} cannot be submitted over HTTP."]
    assert not Job.objects.exists()


def test_a_kind_that_did_not_opt_into_http_is_refused_naming_no_other_kind(client_of):
    assert not registry.get("test.poison").http  # kills the worker that runs it
    attacker = client_of("attacker", SUBMIT)
    for kind in ("test.poison", "no.such.kind"):
        body = problem(attacker.submit({"kind": kind, "payload": {}}), 400)
        assert body["errors"] == {"kind": [f"Kind {kind!r} cannot be submitted over HTTP."]}
        for other in registry.kinds():
            assert other == kind or other not in body["detail"], f"the answer names the kind {other!r}"
    assert not Job.objects.exists()


def test_a_worker_never_imports_a_module_path_read_from_a_task_payload(spawn_worker, tmp_path: Path):
    """A django.task job (made here by code, as a database writer could) naming a module that
    leaves a mark when imported: the worker refuses to run it and never imports it."""
    mark = tmp_path / "imported"
    job = reliableq.enqueue("django.task", {"task": "tests.security.canary.task", "args": []}, max_attempts=1)
    worker = spawn_worker("--burst", env={"SECURITY_CANARY_FILE": str(mark)})
    assert worker.wait(timeout=60) == 0, worker.output()[-2000:]

    job.refresh_from_db()
    assert job.status == JobStatus.DEAD and job.attempts == 1
    assert "No task 'tests.security.canary.task' is registered" in job.last_error
    assert not mark.exists(), "the worker imported a module named by a payload"


def test_a_user_without_charges_add_charge_cannot_make_a_charge(client_of):
    submitter = client_of("submitter", SUBMIT, "reliableq.view_job")
    answer = submitter.request(
        "POST", "/v1/charges", json={"amount": 999, "currency": "EUR"}, headers={"Idempotency-Key": "mine"}
    )
    assert "charges.add_charge" in problem(answer, 403)["detail"]
    assert not Charge.objects.exists()


def test_a_plain_users_charge_job_is_refused_and_no_worker_ever_charges(client_of, spawn_worker, site):
    plain = client_of("plain")
    problem(plain.submit({"kind": "charge", "payload": {"amount": 700, "currency": "EUR"}}), 403)
    worker = spawn_worker("--burst", env={"CHARGES_SERVICE_URL": site.url})
    assert worker.wait(timeout=60) == 0, worker.output()[-2000:]
    assert not Job.objects.exists() and not Charge.objects.exists()
