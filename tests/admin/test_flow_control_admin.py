"""The admin's flow-control surface: pause and resume on the queue dashboard, the Cancel button of a
running job, the job page's flow-control fields, kinds with limits; each refused without its permission."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.test import Client

import reliableq
from reliableq import services
from reliableq.models import Job, JobStatus, QueueState, Worker

from .conftest import OPERATOR_PERMS, client_for, job_in, make_staff
from .pages import body, messages_of, section, text

DASHBOARD = "/admin/reliableq/queuedashboard/"
PAUSE = DASHBOARD + "pause/"
RESUME = DASHBOARD + "resume/"

pytestmark = pytest.mark.django_db


@pytest.fixture
def pauser() -> Client:
    return client_for(make_staff("pauser", ("reliableq", "view_job"), ("reliableq", "pause_queue")))


def queue_audit(name: str) -> list[str]:
    entries = LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(QueueState), object_id=name)
    return [e.get_change_message() for e in entries.order_by("pk")]


def page_url(job: Job) -> str:
    return f"/admin/reliableq/job/{job.pk}/change/"


# -- the queue dashboard ---------------------------------------------------------------------


def test_dashboard_lists_queues_with_their_state_and_offers_pause_to_a_pauser(pauser: Client) -> None:
    job_in(JobStatus.PENDING, queue="mail")
    services.pause("reports")
    # A live worker serves mail: "running" (with none, the dashboard says "no worker").
    Worker.objects.create(id="host:1", host="host", pid=1, queues=["mail"], concurrency=1, lease_seconds=30)

    page = body(pauser.get(DASHBOARD))

    mail = text(section(page, 'id="queue-mail"', "</tr>"))
    reports = section(page, 'id="queue-reports"', "</tr>")
    assert "running" in mail and "Pause" in mail
    assert "paused" in text(reports) and "until resumed" in text(reports) and "resume-queue" in reports
    assert "csrfmiddlewaretoken" in section(page, 'id="queues"', 'id="limits"')


def test_pause_from_the_dashboard_until_a_time_then_resume_audited(pauser: Client) -> None:
    reliableq.enqueue("demo.noop", {}, queue="mail")  # due by database time
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).replace(microsecond=0)

    paused = pauser.post(PAUSE, {"queue": "mail", "until": until.isoformat()}, follow=True)

    assert messages_of(paused) == [f"Queue mail paused until {until.isoformat()}."]
    assert QueueState.objects.get(name="mail").paused_until == until
    assert "paused" in text(section(body(paused), 'id="queue-mail"', "</tr>"))
    assert 'id="paused-count">1</td>' in body(paused)

    resumed = pauser.post(RESUME, {"queue": "mail"}, follow=True)

    assert messages_of(resumed) == ["Queue mail resumed."]
    assert services.paused_queues() == set()
    assert queue_audit("mail") == [f"Paused until {until.isoformat()}", "Resumed."]


@pytest.mark.parametrize(
    ("form", "message"),
    [({"queue": "no spaces"}, "queue must be"), ({"queue": "mail", "until": "soon"}, "until must be an iso 8601")],
)
def test_a_bad_queue_or_until_is_an_error_message_and_pauses_nothing(pauser: Client, form: dict, message: str) -> None:
    response = pauser.post(PAUSE, form, follow=True)

    assert response.status_code == 200
    assert message in " ".join(messages_of(response)).lower()
    assert not QueueState.objects.exists()


def test_staff_without_pause_queue_sees_no_buttons_and_forged_posts_are_refused(operator_client: Client) -> None:
    job_in(JobStatus.PENDING, queue="mail")
    services.pause("reports")

    page = body(operator_client.get(DASHBOARD))
    assert "pause-queue" not in page and "resume-queue" not in page
    assert operator_client.post(PAUSE, {"queue": "mail"}).status_code == 403
    assert operator_client.post(RESUME, {"queue": "reports"}).status_code == 403
    assert services.paused_queues() == {"reports"}
    assert queue_audit("mail") == [] and queue_audit("reports") == []


def test_pause_and_resume_need_post_and_csrf(pauser: Client) -> None:
    assert pauser.get(PAUSE + "?queue=mail").status_code == 405
    strict = client_for(make_staff("strict", ("reliableq", "view_job"), ("reliableq", "pause_queue")))
    strict.handler.enforce_csrf_checks = True
    assert strict.post(PAUSE, {"queue": "mail"}).status_code == 403
    assert not QueueState.objects.exists()


def test_dashboard_lists_kinds_with_limits(viewer_client: Client, per_key_kind: None) -> None:
    limits = text(section(body(viewer_client.get(DASHBOARD)), 'id="limits"', "</table>"))
    assert "test.per_key - 2 -" in limits


# -- a job's page ----------------------------------------------------------------------------


def test_job_page_shows_its_flow_control_fields(operator_client: Client, per_key_kind: None) -> None:
    job = reliableq.enqueue("test.per_key", {}, concurrency_key="acct-7", unique_key="nightly")
    Job.objects.filter(pk=job.pk).update(snoozes=3)

    page = text(body(operator_client.get(page_url(job))))

    assert "acct-7" in page and "nightly" in page
    assert "Snoozes: 3" in page or "snoozes 3" in page.lower()


def test_cancel_button_asks_a_running_job_to_stop_and_is_audited(operator_client: Client) -> None:
    job = job_in(JobStatus.RUNNING)
    page = body(operator_client.get(page_url(job)))
    assert 'id="cancel-job"' in page

    asked = body(operator_client.get(f"/admin/reliableq/job/{job.pk}/cancel/"))
    assert f"Cancel job {str(job.pk)[-8:]}?" in asked and "ends CANCELLED when it does" in asked
    assert Job.objects.get(pk=job.pk).cancel_requested_at is None  # asking changes nothing

    response = operator_client.post(f"/admin/reliableq/job/{job.pk}/cancel/", {"confirm": "yes"}, follow=True)

    assert messages_of(response) == [f"Job {job.pk} was asked to stop: it ends CANCELLED when its handler stops."]
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.cancel_requested_at is not None
    assert 'id="cancel-job"' not in body(response)  # asked once; the page says so instead
    assert "the handler sees job.cancel_requested" in text(body(response))


def test_cancel_button_cancels_a_pending_job(operator_client: Client) -> None:
    job = job_in(JobStatus.PENDING)
    operator_client.post(f"/admin/reliableq/job/{job.pk}/cancel/")
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING  # a POST without confirm=yes asks first
    operator_client.post(f"/admin/reliableq/job/{job.pk}/cancel/", {"confirm": "yes"})
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_a_finished_jobs_page_has_no_cancel_button_and_a_forged_cancel_changes_nothing(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)
    assert 'id="cancel-job"' not in body(operator_client.get(page_url(job)))
    response = operator_client.post(f"/admin/reliableq/job/{job.pk}/cancel/", {"confirm": "yes"}, follow=True)
    assert "this needs a WAITING, PENDING or RUNNING job" in " ".join(messages_of(response))
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD


def test_staff_without_cancel_job_sees_no_cancel_button_and_a_forged_post_is_refused(viewer_client: Client) -> None:
    job = job_in(JobStatus.RUNNING)
    assert 'id="cancel-job"' not in body(viewer_client.get(page_url(job)))
    assert viewer_client.post(f"/admin/reliableq/job/{job.pk}/cancel/", {"confirm": "yes"}).status_code == 403
    assert viewer_client.get(f"/admin/reliableq/job/{job.pk}/cancel/").status_code == 403
    assert Job.objects.get(pk=job.pk).cancel_requested_at is None


def test_operator_perms_do_not_include_pause(db: None) -> None:
    assert ("reliableq", "pause_queue") not in OPERATOR_PERMS
