"""Attack 2: Idempotency-Key as one global namespace, shared with internal keys and other users."""

from __future__ import annotations

import pytest

import reliableq
from charges.models import Charge, ChargeRequest
from reliableq import registry, scheduler, schedules
from reliableq.models import Job, JobStatus, Schedule
from reliableq.queue.schedules import database_now
from testproject import accounts
from testproject.jobs import every_second

from .conftest import problem

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = "reliableq.submit_job"
BODY = {"kind": "demo.noop", "payload": {"order": 1}}


@pytest.fixture
def periodic():
    """A schedule whose next slot has come: the next round makes its job."""
    reliableq.handler("test.periodic")(every_second)
    schedule = schedules.save(Schedule(name="nightly", kind="test.periodic", cron="* * * * * *"))
    slot = database_now().replace(microsecond=0)
    Schedule.objects.filter(pk=schedule.pk).update(next_slot=slot)
    yield slot
    registry._handlers.pop("test.periodic")


def test_a_users_key_cannot_take_a_schedules_slot(client_of, periodic):
    attacker = client_of("attacker", SUBMIT)

    taken = attacker.submit(BODY, key=scheduler.slot_key("nightly", periodic))

    assert taken.status_code == 202, taken.text
    scheduler.serve(late_seconds=16)
    made = Job.objects.get(dedupe_key=scheduler.slot_key("nightly", periodic), dedupe_scope="")
    assert made.kind == "test.periodic", "the round still made the slot's job"
    assert made.payload["scheduled_for"] == periodic.isoformat()


def test_another_users_key_returns_nothing_of_their_job(client_of):
    victim, attacker = client_of("victim", SUBMIT), client_of("attacker", SUBMIT)
    mine = victim.submit({"kind": "demo.noop", "payload": {"card": "victim's"}}, key="order-42")
    assert mine.status_code == 202
    Job.objects.filter(pk=mine.json()["id"]).update(last_error="victim's error")

    same_body = attacker.submit({"kind": "demo.noop", "payload": {"card": "victim's"}}, key="order-42")
    other_body = attacker.submit({"kind": "demo.noop", "payload": {"probe": 1}}, key="order-43")

    assert same_body.status_code == 202, "a new job of the attacker's own, not the victim's 200"
    assert same_body.json()["id"] != mine.json()["id"]
    assert mine.json()["id"] not in same_body.text and "victim's error" not in same_body.text
    assert other_body.status_code == 202
    assert Job.objects.filter(dedupe_key="order-42").count() == 2
    assert Job.objects.get(pk=mine.json()["id"]).submitted_by == "victim"


def test_a_409_happens_only_on_ones_own_key(client_of):
    victim, attacker = client_of("victim", SUBMIT), client_of("attacker", SUBMIT)
    victims = victim.submit(BODY, key="k-1").json()

    probe = attacker.submit({"kind": "demo.noop", "payload": {"other": True}}, key="k-1")

    assert probe.status_code == 202 and victims["id"] not in probe.text
    own = problem(attacker.submit({"kind": "demo.noop", "payload": {"changed": True}}, key="k-1"), 409)
    assert probe.json()["id"] in own["detail"] and victims["id"] not in own["detail"]


def test_an_effect_key_cannot_pre_empt_a_jobs_charge(client_of, spawn_worker, site):
    """The attacker may submit jobs but not make charges, so `reliableq:charge:<id>` on
    /v1/charges is refused, and the victim's charge job then charges once."""
    service = accounts.token_for("charge-service", "charges.add_charge")
    victim, attacker = client_of("victim", SUBMIT), client_of("attacker", SUBMIT, "reliableq.view_job")
    job = victim.submit({"kind": "charge", "payload": {"amount": 1200, "currency": "EUR"}}, key="pay-1").json()

    pre_empt = attacker.request(
        "POST",
        "/v1/charges",
        json={"amount": 1, "currency": "EUR"},
        headers={"Idempotency-Key": f"reliableq:charge:{job['id']}"},
    )
    problem(pre_empt, 403)
    assert not Charge.objects.exists()

    worker = spawn_worker("--burst", env={"CHARGES_SERVICE_URL": site.url, "CHARGES_SERVICE_TOKEN": service})
    assert worker.wait(timeout=60) == 0, worker.output()[-2000:]
    assert Job.objects.get(pk=job["id"]).status == JobStatus.SUCCEEDED
    charge = Charge.objects.get()
    assert (charge.idempotency_key, charge.amount) == (f"reliableq:charge:{job['id']}", 1200)
    assert ChargeRequest.objects.count() == 1


def test_jobs_record_who_submitted_them_in_the_api_and_the_admin(client_of, site):
    from .conftest import PASSWORD, admin_session

    submitter = client_of("alice", SUBMIT)
    operator = client_of("olga", "reliableq.view_job", password=PASSWORD)
    job = submitter.submit(BODY).json()
    coded = reliableq.enqueue("demo.noop", {})

    assert job["submitted_by"] == "alice"
    assert operator.request("GET", f"/v1/jobs/{job['id']}").json()["submitted_by"] == "alice"
    assert operator.request("GET", f"/v1/jobs/{coded.id}").json()["submitted_by"] is None
    page = admin_session(site, "olga").get(f"{site.url}/admin/reliableq/job/{job['id']}/change/", timeout=30)
    assert page.status_code == 200
    assert "Submitted by" in page.text and "alice" in page.text


def test_deleting_a_submitter_keeps_their_jobs_keys_and_the_record_of_who_submitted_them(client_of):
    gone = client_of("gone", SUBMIT)
    job = gone.submit(BODY, key="keep-me").json()
    gone.user.delete()
    row = Job.objects.get(pk=job["id"])
    assert row.submitted_by == "gone" and row.dedupe_key == "keep-me"
    # The scope stays the old user's: a code caller's key of the same text is still its own.
    assert reliableq.enqueue("demo.noop", {}, dedupe_key="keep-me").id != row.id
