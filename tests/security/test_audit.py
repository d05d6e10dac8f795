"""Attack 6: replay and cancel through the API left no trace of who did it (the admin's did)."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry

import reliableq
from reliableq import services
from reliableq.models import Job, JobStatus
from tests.api.jobs import job_in

from .conftest import PASSWORD, admin_session, csrf_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def entries(job: Job) -> list[tuple[str, int, str]]:
    return [
        (e.user.username, e.action_flag, e.change_message)
        for e in LogEntry.objects.filter(object_id=str(job.pk)).select_related("user").order_by("id")
    ]


def test_api_replay_and_cancel_write_the_same_audit_entry_as_the_admin(client_of, site):
    api_user = client_of("ada", "reliableq.replay_job", "reliableq.cancel_job")
    client_of("olga", "reliableq.view_job", "reliableq.replay_job", password=PASSWORD)
    dead, pending, dead_too = job_in(JobStatus.DEAD), reliableq.enqueue("demo.noop", {}), job_in(JobStatus.DEAD)

    assert api_user.request("POST", f"/v1/jobs/{dead.id}/replay").status_code == 202
    assert api_user.request("POST", f"/v1/jobs/{pending.id}/cancel").status_code == 200
    session = admin_session(site, "olga")
    token = csrf_of(session, site, f"/admin/reliableq/job/{dead_too.id}/change/")
    session.post(
        f"{site.url}/admin/reliableq/job/{dead_too.id}/replay/",
        data={"csrfmiddlewaretoken": token, "confirm": "yes"},
        headers={"Referer": site.url + "/admin/"},
        timeout=30,
    )

    assert entries(dead) == [("ada", CHANGE, services.REPLAYED)]
    assert entries(pending) == [("ada", CHANGE, services.CANCELLED)]
    assert entries(dead_too) == [("olga", CHANGE, services.REPLAYED)]


def test_a_refused_or_failed_change_leaves_no_audit_entry(client_of):
    api_user = client_of("ada", "reliableq.replay_job")
    pending = reliableq.enqueue("demo.noop", {})
    assert api_user.request("POST", f"/v1/jobs/{pending.id}/replay").status_code == 409  # not DEAD
    assert api_user.request("POST", f"/v1/jobs/{pending.id}/cancel").status_code == 403  # no permission
    assert entries(pending) == []
    assert Job.objects.get(pk=pending.id).status == JobStatus.PENDING
