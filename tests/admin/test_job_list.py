"""The job changelist: what each row shows, the filters, the exact search and the order."""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from django.test import Client

from reliableq.models import Job, JobStatus

from .conftest import job_in
from .pages import body, job_rows, listed_ids, text

LIST = "/admin/reliableq/job/"
BADGE = re.compile(r'<span class="rq-status rq-(\w+)" style="[^"]*background:(#[0-9a-fA-F]{3,6})[^"]*">(\w+)</span>')

pytestmark = pytest.mark.django_db


def ids(*jobs: Job) -> set[str]:
    return {str(j.pk) for j in jobs}


def test_job_list_shows_one_distinct_badge_per_status_and_each_rows_columns(operator_client: Client) -> None:
    long_error = "ValueError: the card was declined by the issuer " + "x" * 400
    jobs = {
        JobStatus.WAITING: job_in(JobStatus.WAITING, kind="wf.step"),
        JobStatus.PENDING: job_in(JobStatus.PENDING, kind="test.flaky", queue="emails", priority=7),
        JobStatus.RUNNING: job_in(JobStatus.RUNNING, kind="test.sleep", worker_id="w-running-1"),
        JobStatus.SUCCEEDED: job_in(JobStatus.SUCCEEDED, kind="demo.noop"),
        JobStatus.DEAD: job_in(JobStatus.DEAD, last_error=long_error),
        JobStatus.CANCELLED: job_in(JobStatus.CANCELLED, kind="demo.noop", last_error="cancelled by ops"),
    }

    response = operator_client.get(LIST)

    assert response.status_code == 200
    rows = {text(row["short_id"]): row for row in job_rows(response)}
    assert set(rows) == {str(j.pk)[-8:] for j in jobs.values()}
    colours = {}
    for status, job in jobs.items():
        row = rows[str(job.pk)[-8:]]
        (badge,) = BADGE.findall(row["status_display"])
        css, colour, label = badge
        assert (css, label) == (status.lower(), status)
        colours[status] = colour.lower()
        assert text(row["kind"]) == job.kind
        assert text(row["queue"]) == job.queue
        assert text(row["attempts_display"]) == f"{job.attempts} / {job.max_attempts}"
    assert len(set(colours.values())) == len(JobStatus.values), f"badge colours must differ per status: {colours}"

    assert text(rows[str(jobs[JobStatus.RUNNING].pk)[-8:]]["attempts_display"]) == "1 / 5"
    assert text(rows[str(jobs[JobStatus.DEAD].pk)[-8:]]["attempts_display"]) == "3 / 3"
    assert text(rows[str(jobs[JobStatus.PENDING].pk)[-8:]]["queue"]) == "emails"
    # A PENDING job says when it runs, to the second (overdue: due since its insert, unclaimed); the
    # others have nothing to wait for.
    assert re.fullmatch(
        r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d( overdue)?", text(rows[str(jobs[JobStatus.PENDING].pk)[-8:]]["next_run"])
    )
    assert text(rows[str(jobs[JobStatus.DEAD].pk)[-8:]]["next_run"]) == "-"
    # The last error is shortened to 60 characters in the list (300 on hover); the job's page has it whole.
    dead_row = rows[str(jobs[JobStatus.DEAD].pk)[-8:]]["short_error"]
    assert text(dead_row) == long_error[:59] + "…"
    assert f'title="{long_error[:300]}"' in dead_row
    assert long_error not in body(response)
    assert text(rows[str(jobs[JobStatus.CANCELLED].pk)[-8:]]["short_error"]) == "cancelled by ops"


def test_an_overdue_pending_job_is_marked_so_in_the_list_and_on_its_page(operator_client: Client) -> None:
    # Issue 50: an overdue job's "Runs at" showed a past time with no marker.
    from django.db.models.functions import Now

    late = job_in(JobStatus.PENDING, kind="test.flaky")
    Job.objects.filter(pk=late.pk).update(run_at=Now() - dt.timedelta(minutes=5))
    later = job_in(JobStatus.PENDING, kind="test.flaky")
    Job.objects.filter(pk=later.pk).update(run_at=Now() + dt.timedelta(minutes=5))

    rows = {text(row["short_id"]): row for row in job_rows(operator_client.get(LIST))}
    assert text(rows[str(late.pk)[-8:]]["next_run"]).endswith(" overdue")
    assert "overdue" not in text(rows[str(later.pk)[-8:]]["next_run"])
    page = body(operator_client.get(f"{LIST}{late.pk}/change/"))
    assert "ago: overdue, due and not yet claimed" in page
    assert "overdue" not in body(operator_client.get(f"{LIST}{later.pk}/change/"))


def test_job_list_is_newest_first(operator_client: Client) -> None:
    base = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
    # Inserted out of order, so the order on the page can only come from created_at.
    jobs = [job_in(JobStatus.PENDING, created_at=base + dt.timedelta(minutes=m)) for m in (3, 0, 4, 1, 2)]

    response = operator_client.get(LIST)

    newest_first = sorted(jobs, key=lambda j: j.created_at, reverse=True)
    assert listed_ids(response) == [str(j.pk) for j in newest_first]


def test_status_filter_shows_only_jobs_in_that_status(operator_client: Client) -> None:
    dead = [job_in(JobStatus.DEAD), job_in(JobStatus.DEAD)]
    others = [job_in(s) for s in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.CANCELLED)]

    page = body(operator_client.get(LIST))
    assert 'href="?status__exact=DEAD"' in page  # the filter is offered in the sidebar

    response = operator_client.get(LIST, {"status__exact": "DEAD"})
    assert response.status_code == 200
    assert set(listed_ids(response)) == ids(*dead)

    response = operator_client.get(LIST, {"status__exact": "PENDING"})
    assert set(listed_ids(response)) == ids(others[0])


def test_kind_filter_offers_the_kinds_that_have_jobs_and_shows_only_that_kind(operator_client: Client) -> None:
    flaky = [job_in(JobStatus.PENDING, kind="test.flaky"), job_in(JobStatus.DEAD, kind="test.flaky")]
    job_in(JobStatus.PENDING, kind="demo.noop")
    job_in(JobStatus.DEAD, kind="test.always_fails")
    job_in(JobStatus.DEAD, kind="billing.removed_kind")  # no handler any more: its DEAD jobs still list

    page = body(operator_client.get(LIST))
    kind_filter = page[page.index('data-filter-title="kind"') :]
    kind_filter = kind_filter[: kind_filter.index("</details>")]
    offered = re.findall(r'href="\?kind=([^"]+)"', kind_filter)
    assert offered == ["billing.removed_kind", "demo.noop", "test.always_fails", "test.flaky"]
    assert 'href="?kind=charge"' not in page  # registered, but no job of that kind

    response = operator_client.get(LIST, {"kind": "test.flaky"})
    assert response.status_code == 200
    assert set(listed_ids(response)) == ids(*flaky)
    # A kind chosen by URL stays in the list of choices, jobs or not.
    assert 'href="?kind=charge"' in body(operator_client.get(LIST, {"kind": "charge"}))


def test_queue_filter_offers_the_queues_in_use_and_shows_only_that_queue(operator_client: Client) -> None:
    emails = [job_in(JobStatus.PENDING, queue="emails"), job_in(JobStatus.SUCCEEDED, queue="emails")]
    job_in(JobStatus.PENDING, queue="default")
    job_in(JobStatus.PENDING, queue="reports")

    page = body(operator_client.get(LIST))
    queue_filter = page[page.index('data-filter-title="queue"') :]
    queue_filter = queue_filter[: queue_filter.index("</details>")]
    assert re.findall(r'href="\?queue=([^"]+)"', queue_filter) == ["default", "emails", "reports"]

    response = operator_client.get(LIST, {"queue": "emails"})
    assert response.status_code == 200
    assert set(listed_ids(response)) == ids(*emails)


def test_lease_expired_filter_shows_running_jobs_whose_lease_ran_out_and_not_live_ones(operator_client: Client) -> None:
    expired = job_in(JobStatus.RUNNING, lease_seconds=-60, worker_id="w-gone")
    job_in(JobStatus.RUNNING, lease_seconds=300, worker_id="w-alive")
    job_in(JobStatus.PENDING)
    job_in(JobStatus.DEAD)

    response = operator_client.get(LIST, {"lease": "expired"})

    assert response.status_code == 200
    assert listed_ids(response) == [str(expired.pk)]


def test_search_by_full_job_id_finds_that_job_only(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)
    job_in(JobStatus.DEAD)

    response = operator_client.get(LIST, {"q": str(job.pk)})

    assert response.status_code == 200
    assert listed_ids(response) == [str(job.pk)]


def test_search_by_dedupe_key_finds_that_job(operator_client: Client) -> None:
    job = job_in(JobStatus.PENDING, dedupe_key="order-2024-0042")
    job_in(JobStatus.PENDING, dedupe_key="order-2024-0043")

    assert listed_ids(operator_client.get(LIST, {"q": "order-2024-0042"})) == [str(job.pk)]


def test_search_by_a_uuid_shaped_dedupe_key_finds_that_job(operator_client: Client) -> None:
    """Clients often send UUIDs as Idempotency-Key: such a term is a job id *or* a dedupe key."""
    key = str(uuid.uuid4())
    job = job_in(JobStatus.PENDING, dedupe_key=key)
    other = job_in(JobStatus.PENDING)

    assert listed_ids(operator_client.get(LIST, {"q": key})) == [str(job.pk)]
    assert listed_ids(operator_client.get(LIST, {"q": str(other.pk)})) == [str(other.pk)]


def test_search_by_kind_is_exact(operator_client: Client) -> None:
    flaky = [job_in(JobStatus.PENDING, kind="test.flaky"), job_in(JobStatus.DEAD, kind="test.flaky")]
    job_in(JobStatus.PENDING, kind="demo.noop")

    assert set(listed_ids(operator_client.get(LIST, {"q": "test.flaky"}))) == ids(*flaky)
    # Exact, index-served matches only: no substring search over the table.
    assert listed_ids(operator_client.get(LIST, {"q": "flaky"})) == []


def test_search_by_the_short_id_the_list_shows_finds_that_job(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)
    job_in(JobStatus.DEAD)
    short = str(job.pk)[-8:]
    (_row,) = [r for r in job_rows(operator_client.get(LIST)) if text(r["short_id"]) == short]

    assert listed_ids(operator_client.get(LIST, {"q": short})) == [str(job.pk)]
    assert listed_ids(operator_client.get(LIST, {"q": short.upper()})) == [str(job.pk)]
    assert listed_ids(operator_client.get(LIST, {"q": "00000000"})) == []


def test_the_short_id_is_looked_for_among_the_newest_jobs_only(
    operator_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reliableq.admin import jobs as admin

    base = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
    old = job_in(JobStatus.DEAD, created_at=base)
    new = job_in(JobStatus.DEAD, created_at=base + dt.timedelta(minutes=1))
    monkeypatch.setattr(admin, "SHORT_ID_SCAN", 1)  # the bound: what the search reads, whatever the table holds

    assert listed_ids(operator_client.get(LIST, {"q": str(new.pk)[-8:]})) == [str(new.pk)]
    assert listed_ids(operator_client.get(LIST, {"q": str(old.pk)[-8:]})) == []
    assert listed_ids(operator_client.get(LIST, {"q": str(old.pk)})) == [str(old.pk)]  # its full id always


def test_job_list_and_confirmation_page_escape_html_in_errors(operator_client: Client) -> None:
    hostile = '<img src=x onerror="alert(1)"> failed'
    job = job_in(JobStatus.DEAD, last_error=hostile)

    listing = body(operator_client.get(LIST))
    confirmation = body(
        operator_client.post(LIST, {"action": "replay_selected", "_selected_action": [str(job.pk)], "index": "0"})
    )

    for page in (listing, confirmation):
        assert "<img src=x" not in page
        assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; failed" in page
