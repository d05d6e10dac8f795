"""The bundled `charge` job against the live charge service: real workers, real HTTP, real SIGKILL.

Every end state is read back from PostgreSQL as the counts of DESIGN.md: A attempts, H requests
that reached the service (ChargeRequest rows), C committed charges, F successful finalizations.
"""

from __future__ import annotations

import signal

import pytest

import reliableq
from charges.faults import set_knob
from charges.models import Charge, ChargeRequest
from charges.services import create_charge
from reliableq.models import Attempt, Job, JobStatus, Outcome
from reliableq.services import replay
from tests.support import wait_until

from .helpers import counts, effect_key, outcomes

pytestmark = [pytest.mark.slow]

EUR_500 = {"amount": 500, "currency": "EUR"}


def status_of(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


@pytest.mark.parametrize(
    ("point", "requests"),
    [
        ("after_claim_before_effect", 1),  # worker A never sent its request
        ("after_effect_before_finalize", 2),  # A's charge committed; B's request gets the original
        ("during_finalize", 2),  # A's finalize rolled back with the kill; B charges nothing new
    ],
)
def test_a_worker_killed_in_a_crash_window_leaves_one_charge_after_another_worker_recovers(
    charge_service, spawn_worker, point, requests
):
    job = reliableq.enqueue("charge", EUR_500)
    assert job.effect_key == f"reliableq:charge:{job.id}"

    worker_a = spawn_worker(
        "--concurrency",
        "1",
        env=charge_service.worker_env(RELIABLEQ_FAULT_INJECTION="1", RELIABLEQ_CRASH_AT=point),
    )
    assert worker_a.wait(timeout=30) == -signal.SIGKILL, worker_a.output()
    assert f"fault injection: SIGKILL at {point}" in worker_a.output()

    # At the kill: the job is still A's, attempt 1 open, the charge committed iff A got that far.
    job.refresh_from_db()
    assert (job.status, job.worker_id, outcomes(job)) == (JobStatus.RUNNING, "w1", [Outcome.RUNNING])
    charged = Charge.objects.filter(idempotency_key=effect_key(job)).exists()
    assert charged == (point != "after_claim_before_effect")

    worker_b = spawn_worker("--burst", env=charge_service.worker_env())
    assert worker_b.wait(timeout=30) == 0, worker_b.output()

    assert status_of(job) == JobStatus.SUCCEEDED
    assert counts(job) == {"A": 2, "H": requests, "C": 1, "F": 1}
    first, second = Attempt.objects.filter(job=job).order_by("number")
    assert (first.worker_id, first.outcome) == ("w1", Outcome.LEASE_EXPIRED)
    assert (second.worker_id, second.outcome) == ("w2", Outcome.SUCCEEDED)
    charge = Charge.objects.get(idempotency_key=effect_key(job))
    assert (charge.amount, charge.currency) == (500, "EUR")
    if requests == 2:
        # The charge is A's, made before B's attempt began: B was answered with the original.
        assert charge.created_at < second.started_at
    assert Charge.objects.count() == 1


def test_a_charge_committed_without_an_answer_is_retried_with_the_same_key_and_charged_once(
    charge_service, spawn_worker
):
    set_knob(no_answer_rate=1.0)  # commit the charge, then drop the connection unanswered
    job = reliableq.enqueue("charge", EUR_500)
    worker = spawn_worker(
        env=charge_service.worker_env(RELIABLEQ_BACKOFF_BASE_SECONDS="0.5", RELIABLEQ_BACKOFF_MAX_SECONDS="0.5")
    )
    key = effect_key(job)
    wait_until(
        lambda: ChargeRequest.objects.filter(idempotency_key=key, fault="no_answer").exists(),
        timeout=30,
        what="the first request answered with silence",
    )
    set_knob()  # the service answers again
    wait_until(
        lambda: status_of(job) == JobStatus.SUCCEEDED,
        timeout=30,
        what=f"job {job.id} to succeed:\n{worker.output()[-3000:]}",
    )

    c = counts(job)
    assert c["C"] == 1 and c["F"] == 1 and c["H"] >= 2 and c["A"] == c["H"]
    attempts = list(Attempt.objects.filter(job=job).order_by("number"))
    assert attempts[0].outcome == Outcome.FAILED_TRANSIENT
    assert "no answer from the charge service" in attempts[0].error
    assert [a.outcome for a in attempts[1:-1]] == [Outcome.FAILED_TRANSIENT] * (len(attempts) - 2)
    assert attempts[-1].outcome == Outcome.SUCCEEDED
    # Every request carried the one key; the silent ones committed the one charge.
    faults = list(ChargeRequest.objects.filter(idempotency_key=key).order_by("id").values_list("fault", flat=True))
    assert faults == ["no_answer"] * (len(faults) - 1) + [""]
    assert ChargeRequest.objects.exclude(idempotency_key=key).count() == 0
    assert Charge.objects.get(idempotency_key=key).created_at < attempts[-1].started_at


def test_charge_jobs_facing_503_half_the_time_all_succeed_with_one_charge_each(charge_service, spawn_worker):
    set_knob(unavailable_rate=0.5)
    jobs = [reliableq.enqueue("charge", {"amount": 100 + n, "currency": "EUR"}, max_attempts=20) for n in range(6)]
    # Not --burst: a burst worker exits when nothing is *due*, and a retry waiting out its
    # backoff is not due yet.
    worker = spawn_worker("--concurrency", "4", env=charge_service.worker_env())
    unfinished = Job.objects.filter(pk__in=[j.pk for j in jobs]).exclude(status=JobStatus.SUCCEEDED)
    wait_until(lambda: not unfinished.exists(), timeout=60, what=f"every job to succeed:\n{worker.output()[-3000:]}")

    for job in jobs:
        assert status_of(job) == JobStatus.SUCCEEDED
        c = counts(job)
        assert (c["C"], c["F"]) == (1, 1)
        assert c["H"] == c["A"]  # every attempt reached the service once
        unavailable = ChargeRequest.objects.filter(idempotency_key=effect_key(job), fault="unavailable").count()
        assert outcomes(job) == [Outcome.FAILED_TRANSIENT] * unavailable + [Outcome.SUCCEEDED]
        assert Charge.objects.get(idempotency_key=effect_key(job)).amount == job.payload["amount"]
    assert Charge.objects.count() == len(jobs)


def test_a_charge_the_service_rejects_with_400_goes_dead_after_one_attempt_without_a_charge(
    charge_service, spawn_worker
):
    job = reliableq.enqueue("charge", {"amount": -5, "currency": "EUR"})
    worker = spawn_worker("--burst", env=charge_service.worker_env())
    assert worker.wait(timeout=30) == 0, worker.output()

    job.refresh_from_db()
    assert job.status == JobStatus.DEAD
    assert outcomes(job) == [Outcome.FAILED_PERMANENT]
    assert counts(job) == {"A": 1, "H": 1, "C": 0, "F": 0}
    assert "400" in job.last_error and "amount" in job.last_error
    assert not Charge.objects.exists()


def test_a_charge_whose_key_was_used_for_another_request_goes_dead_after_one_attempt(charge_service, spawn_worker):
    job = reliableq.enqueue("charge", EUR_500)
    other = create_charge(idempotency_key=effect_key(job), amount=999, currency="EUR").charge
    worker = spawn_worker("--burst", env=charge_service.worker_env())
    assert worker.wait(timeout=30) == 0, worker.output()

    job.refresh_from_db()
    assert job.status == JobStatus.DEAD
    assert outcomes(job) == [Outcome.FAILED_PERMANENT]
    assert "idempotency key was reused with another request" in job.last_error
    assert list(Charge.objects.values_list("id", "amount")) == [(other.id, 999)]
    assert counts(job)["H"] == 1


def test_a_replayed_charge_job_sends_the_same_key_and_charges_once(charge_service, spawn_worker):
    set_knob(unavailable_rate=1.0)  # the service is down: both attempts get 503
    job = reliableq.enqueue("charge", EUR_500, max_attempts=2)
    key = effect_key(job)
    first = spawn_worker(env=charge_service.worker_env())  # not --burst: it would exit during the backoff
    wait_until(lambda: status_of(job) == JobStatus.DEAD, timeout=30, what=f"job {job.id} to die:\n{first.output()}")
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0, first.output()
    job.refresh_from_db()
    assert outcomes(job) == [Outcome.FAILED_TRANSIENT, Outcome.FAILED_TRANSIENT]
    before_replay = ChargeRequest.objects.order_by("-id").values_list("id", flat=True).first()

    replayed = replay(job.id)
    assert (replayed.id, replayed.status, replayed.effect_key) == (job.id, JobStatus.PENDING, key)
    set_knob()  # the cause is fixed
    second = spawn_worker("--burst", env=charge_service.worker_env())
    assert second.wait(timeout=30) == 0, second.output()

    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    after = ChargeRequest.objects.filter(id__gt=before_replay)
    assert list(after.values_list("idempotency_key", "fault")) == [(key, "")]
    assert set(ChargeRequest.objects.values_list("idempotency_key", flat=True)) == {key}
    assert counts(job) == {"A": 3, "H": 3, "C": 1, "F": 1}
    assert outcomes(job) == [Outcome.FAILED_TRANSIENT, Outcome.FAILED_TRANSIENT, Outcome.SUCCEEDED]
    assert Charge.objects.count() == 1
