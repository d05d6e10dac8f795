"""The queue dashboard at /admin/reliableq/queuedashboard/: counts, the oldest due job, the last hour."""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from django.db.models.functions import Now
from django.test import Client

from reliableq.models import Attempt, Job, JobStatus, Outcome

from .conftest import client_for, job_in, make_staff
from .pages import body, section, text

DASHBOARD = "/admin/reliableq/queuedashboard/"
JOBS = "/admin/reliableq/job/"

pytestmark = pytest.mark.django_db


def dashboard(client: Client) -> str:
    response = client.get(DASHBOARD)
    assert response.status_code == 200
    return body(response)


def by_status(page: str) -> dict[str, tuple[int, str]]:
    """{STATUS: (count, link)} from the "Jobs by status" table."""
    table = section(page, 'id="by-status"', "</table>")
    found = re.findall(r'rq-\w+"[^>]*>(\w+)</span></th><td><a href="([^"]+)">(\d+)</a>', table)
    return {status: (int(count), link) for status, link, count in found}


def by_kind(page: str) -> dict[str, dict[str, int]]:
    """{kind: {STATUS: count}} from the "Jobs by kind" table (empty cells are zero)."""
    table = section(page, 'id="by-kind"', "</table>")
    header = re.findall(r"<th>(\w+)</th>", section(table, "<thead>", "</thead>"))[1:]
    result = {}
    for row in re.findall(r"<tr><td>(.*?)</tr>", table, re.S):
        cells = [text(c) for c in re.findall(r"(?:^|<td>)(.*?)</td>", row, re.S)]
        result[cells[0]] = {s: int(c) for s, c in zip(header, cells[1:], strict=False) if c}
    return result


def cell(page: str, cell_id: str) -> str:
    """The text of the dashboard cell <td id="cell_id">."""
    match = re.search(rf'<td id="{cell_id}">(.*?)</td>', page, re.S)
    assert match, f"no cell {cell_id!r} on the dashboard"
    return text(match.group(1))


def test_admin_index_links_to_the_queue_dashboard(operator_client: Client, viewer_client: Client) -> None:
    for client in (operator_client, viewer_client):
        response = client.get("/admin/")
        assert response.status_code == 200
        assert f'href="{DASHBOARD}"' in body(response)
        assert "Queue dashboard" in body(response)


def test_dashboard_counts_jobs_by_status_and_by_kind(operator_client: Client) -> None:
    for status, kind, n in [
        (JobStatus.PENDING, "demo.noop", 2),
        (JobStatus.PENDING, "test.flaky", 1),
        (JobStatus.RUNNING, "test.sleep", 1),
        (JobStatus.SUCCEEDED, "demo.noop", 3),
        (JobStatus.DEAD, "test.always_fails", 4),
        (JobStatus.CANCELLED, "demo.noop", 1),
    ]:
        for _ in range(n):
            job_in(status, kind=kind)

    page = dashboard(operator_client)

    assert by_status(page) == {
        "WAITING": (0, f"{JOBS}?status__exact=WAITING"),
        "PENDING": (3, f"{JOBS}?status__exact=PENDING"),
        "RUNNING": (1, f"{JOBS}?status__exact=RUNNING"),
        "SUCCEEDED": (3, f"{JOBS}?status__exact=SUCCEEDED"),
        "DEAD": (4, f"{JOBS}?status__exact=DEAD"),
        "CANCELLED": (1, f"{JOBS}?status__exact=CANCELLED"),
    }
    assert by_kind(page) == {
        "demo.noop": {"PENDING": 2, "SUCCEEDED": 3, "CANCELLED": 1},
        "test.always_fails": {"DEAD": 4},
        "test.flaky": {"PENDING": 1},
        "test.sleep": {"RUNNING": 1},
    }


def test_dashboard_shows_the_dead_count_linking_to_the_dead_jobs(operator_client: Client) -> None:
    dead = [job_in(JobStatus.DEAD) for _ in range(3)]
    job_in(JobStatus.PENDING)

    page = dashboard(operator_client)

    link = re.search(r'<a href="([^"]+)">(\d+)</a>', section(page, 'id="dead-count"', "</td>"))
    assert link and link.groups() == (f"{JOBS}?status__exact=DEAD", "3")
    listed = operator_client.get(link.group(1))
    assert set(re.findall(r'href="/admin/reliableq/job/([0-9a-f-]{36})/change/', body(listed))) == {
        str(j.pk) for j in dead
    }


def test_dashboard_shows_the_age_of_the_oldest_due_pending_job_by_database_time(operator_client: Client) -> None:
    oldest = job_in(JobStatus.PENDING)
    Job.objects.filter(pk=oldest.pk).update(run_at=Now() - dt.timedelta(seconds=90))
    job_in(JobStatus.PENDING)  # due now
    not_due = job_in(JobStatus.PENDING)
    Job.objects.filter(pk=not_due.pk).update(run_at=Now() + dt.timedelta(hours=1))
    dead = job_in(JobStatus.DEAD)  # older, but not PENDING
    Job.objects.filter(pk=dead.pk).update(run_at=Now() - dt.timedelta(days=1))

    page = dashboard(operator_client)

    shown = cell(page, "oldest-due")
    assert shown.endswith(" s"), shown
    # The test's transaction fixes PostgreSQL's now() at its start, a moment before the UPDATE.
    assert 85.0 <= float(shown[:-2]) <= 90.0, shown


def test_a_queue_no_live_worker_serves_is_not_called_running(operator_client: Client) -> None:
    # Issue 50: "running" beside "0 live workers", for a queue with nothing due yet.
    from reliableq.models import Worker

    for queue in ("later", "served"):
        job = job_in(JobStatus.PENDING, queue=queue)
        Job.objects.filter(pk=job.pk).update(run_at=Now() + dt.timedelta(hours=1))
    Worker.objects.create(id="host:1", host="host", pid=1, queues=["served"], concurrency=1, lease_seconds=30)

    page = dashboard(operator_client)

    def state(queue: str) -> str:
        found = re.search(rf'<tr id="queue-{queue}">.*?class="queue-state">(.*?)</td>', page, re.S)
        assert found, page
        return text(found.group(1))

    assert state("later") == "no worker"
    assert state("served") == "running"


def test_dashboard_oldest_due_age_is_zero_without_due_pending_jobs(operator_client: Client) -> None:
    not_due = job_in(JobStatus.PENDING)
    Job.objects.filter(pk=not_due.pk).update(run_at=Now() + dt.timedelta(minutes=5))
    job_in(JobStatus.DEAD)

    assert cell(dashboard(operator_client), "oldest-due") == "0.0 s"


def test_dashboard_counts_attempts_and_failures_of_the_last_hour(operator_client: Client) -> None:
    job = job_in(JobStatus.RUNNING, kind="test.flaky")  # one RUNNING attempt, started now
    outcomes = [
        Outcome.SUCCEEDED,
        Outcome.FAILED_TRANSIENT,
        Outcome.FAILED_PERMANENT,
        Outcome.TIMED_OUT,
        Outcome.LEASE_EXPIRED,
        Outcome.LEASE_LOST,
    ]
    for number, outcome in enumerate(outcomes, start=2):
        Attempt.objects.create(job=job, number=number, worker_id="w1", lease_token=uuid.uuid4(), outcome=outcome)
    old = Attempt.objects.create(
        job=job, number=99, worker_id="w1", lease_token=uuid.uuid4(), outcome=Outcome.FAILED_TRANSIENT
    )
    Attempt.objects.filter(pk=old.pk).update(started_at=Now() - dt.timedelta(hours=2))
    job_in(JobStatus.DEAD)  # its three failed attempts started 3 hours ago

    page = dashboard(operator_client)

    assert cell(page, "attempts-hour") == "7"  # 1 running + 6 finished, not the old ones
    assert cell(page, "failures-hour") == "5"  # every outcome but SUCCEEDED and RUNNING


def test_dashboard_is_forbidden_to_staff_without_view_job(db: None) -> None:
    client = client_for(make_staff("charges-clerk", ("charges", "view_charge")))

    assert client.get(DASHBOARD).status_code == 403
    assert client.get(JOBS).status_code == 403
    assert DASHBOARD not in body(client.get("/admin/"))


def test_dashboard_is_open_to_a_viewer(viewer_client: Client) -> None:
    job_in(JobStatus.DEAD)

    assert by_status(dashboard(viewer_client))["DEAD"][0] == 1
