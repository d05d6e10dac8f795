"""A job's page: read-only, its attempt history inline, the payload pretty-printed, a link to its charges."""

from __future__ import annotations

import datetime as dt
import html
import json
import re

import pytest
from django.test import Client
from django.utils import timezone

from charges.models import Charge
from reliableq.models import Attempt, Job, JobStatus, Outcome

from .conftest import add_attempts, job_in
from .pages import attempt_rows, body, form_controls, section, text

pytestmark = pytest.mark.django_db


def page_url(job: Job) -> str:
    return f"/admin/reliableq/job/{job.pk}/change/"


def millisecond(value: dt.datetime) -> str:
    """An attempt's time as the admin writes it: in the current time zone, to the millisecond."""
    local = timezone.localtime(value)
    return local.strftime("%Y-%m-%d %H:%M:%S.") + f"{local.microsecond // 1000:03d}"


def charge(key: str, amount: int = 1200) -> Charge:
    return Charge.objects.create(idempotency_key=key, amount=amount, currency="EUR", request_fingerprint="0" * 64)


def test_job_page_is_read_only(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)

    response = operator_client.get(page_url(job))

    assert response.status_code == 200
    page = body(response)
    assert "<h1>View job</h1>" in page
    job_form = section(page, 'id="job_form"', "</form>")
    assert form_controls(job_form) == []  # no field, no inline row, no button is editable
    for name in ("_save", "_continue", "_addanother", "-DELETE"):
        assert name not in job_form
    assert 'class="deletelink"' not in page
    assert "/admin/reliableq/job/add/" not in page


def test_job_cannot_be_changed_added_or_deleted_through_the_admin(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)

    assert operator_client.post(page_url(job), {"status": "PENDING", "kind": "demo.noop"}).status_code == 403
    assert operator_client.get("/admin/reliableq/job/add/").status_code == 403
    assert operator_client.post(f"/admin/reliableq/job/{job.pk}/delete/", {"post": "yes"}).status_code == 403

    job.refresh_from_db()
    assert (job.status, job.kind) == (JobStatus.DEAD, "test.always_fails")


def test_job_page_shows_every_attempt_inline_with_outcome_worker_token_times_to_the_ms_backoff_and_error(
    operator_client: Client,
) -> None:
    job = job_in(JobStatus.RUNNING, kind="test.flaky", max_attempts=5)
    Attempt.objects.filter(job=job).delete()
    add_attempts(
        job,
        [Outcome.FAILED_TRANSIENT, Outcome.TIMED_OUT, Outcome.RUNNING],
        seconds=2.25,
        errors=["TransientError: attempt 1 failed on purpose", "timed out after 1s", ""],
    )
    Job.objects.filter(pk=job.pk).update(attempts=3)
    attempts = list(Attempt.objects.filter(job=job).order_by("number"))

    rows = attempt_rows(operator_client.get(page_url(job)))

    assert [row["number"] for row in rows] == ["1", "2", "3"]
    for row, attempt in zip(rows, attempts, strict=True):
        assert row["outcome_badge"] == attempt.outcome
        assert row["worker_id"] == attempt.worker_id
        assert row["token"] == str(attempt.lease_token)[-8:]
        assert row["started"] == millisecond(attempt.started_at)
        assert row["error"] == (attempt.error or "-")
    assert [row["duration"] for row in rows] == ["2.250s", "2.250s", "running"]
    assert [row["finished"] for row in rows[:2]] == [millisecond(a.finished_at) for a in attempts[:2]]
    assert rows[2]["finished"] == "-"
    # Attempts one minute apart, each 2.25 s long: each retry waited 57.75 s after the failure before it.
    assert [row["waited"] for row in rows] == ["-", "57.8s", "57.8s"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", rows[0]["started"])


def test_attempt_history_is_shown_to_a_viewer_without_a_separate_attempt_permission(viewer_client: Client) -> None:
    """view_job is enough: the history is part of the job, not a model the operator must be granted apart."""
    job = job_in(JobStatus.DEAD)

    rows = attempt_rows(viewer_client.get(page_url(job)))

    assert [(r["number"], r["outcome_badge"]) for r in rows] == [
        ("1", "FAILED_TRANSIENT"),
        ("2", "FAILED_TRANSIENT"),
        ("3", "FAILED_PERMANENT"),
    ]


def test_job_page_pretty_prints_the_payload_in_a_pre_and_escapes_it(operator_client: Client) -> None:
    payload = {
        "amount": 1200,
        "currency": "EUR",
        "customer": {"id": "c_1", "tags": ["vip", "eu"]},
        "note": "<script>alert('x')</script>",
    }
    job = job_in(JobStatus.PENDING, kind="charge", payload=payload)

    page = body(operator_client.get(page_url(job)))

    pretty = json.dumps(payload, indent=2, sort_keys=True)
    assert '\n  "customer": {\n    "id": "c_1",' in pretty  # indented, one key a line
    match = re.search(r"<pre[^>]*>(.*?)</pre>", section(page, "field-payload_pretty", "</fieldset>"), re.S)
    assert match, "the payload is not in a <pre>"
    assert html.unescape(match.group(1)) == pretty
    assert "<script>alert(" not in page


def test_charge_job_page_links_to_the_charges_admin_filtered_by_its_effect_key(operator_client: Client) -> None:
    job = job_in(JobStatus.SUCCEEDED, kind="charge", payload={"amount": 1200, "currency": "EUR"})
    effect_key = f"reliableq:charge:{job.pk}"
    mine = charge(effect_key)
    charge(f"reliableq:charge:{job_in(JobStatus.SUCCEEDED, kind='charge').pk}", amount=999)

    page = body(operator_client.get(page_url(job)))

    assert effect_key in text(section(page, "field-effect_key", "field-effect_link"))
    link = re.search(
        r'<a href="([^"]+)">charges with key ([^<]+)</a>', section(page, "field-effect_link", "</fieldset>")
    )
    assert link, "no charges link on a charge job's page"
    href, label = html.unescape(link.group(1)), link.group(2)
    assert href == f"/admin/charges/charge/?q={effect_key}"
    assert label == effect_key

    charges_page = operator_client.get(href)
    assert charges_page.status_code == 200
    listed = re.findall(r'href="/admin/charges/charge/([0-9a-f-]{36})/change/', body(charges_page))
    assert listed == [str(mine.pk)]


def test_non_charge_job_page_has_no_charges_link(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)

    page = body(operator_client.get(page_url(job)))

    assert "/admin/charges/charge/" not in section(page, "field-effect_link", "</fieldset>")


def test_a_running_jobs_progress_is_a_bar_on_its_page_and_in_the_list(operator_client):
    import reliableq
    from reliableq import queue as jobqueue
    from tests.api.jobs import claim_one, fresh_queue

    queue = fresh_queue()
    job = reliableq.enqueue("demo.noop", {}, queue=queue)
    claimed = claim_one(queue)
    jobqueue.record_progress([(job.id, claimed.lease_token, {"done": 3, "total": 12, "note": "rows"})])

    page = operator_client.get(f"/admin/reliableq/job/{job.id}/change/").content.decode()
    listing = operator_client.get("/admin/reliableq/job/?status__exact=RUNNING").content.decode()

    for shown in (page, listing):
        assert '<progress class="job-progress" value="0.250" max="1"' in shown, shown[:2000]
        assert "3 of 12 rows" in shown


def test_a_failed_attempts_traceback_is_folded_under_it(operator_client):
    job = job_in(JobStatus.DEAD)
    trace = 'Traceback (most recent call last):\n  File "shop/jobs.py", line 3, in send\nValueError: no <order>\n'
    Attempt.objects.filter(job=job).update(traceback=trace)

    page = operator_client.get(f"/admin/reliableq/job/{job.id}/change/").content.decode()

    assert '<details class="attempt-traceback"><summary>ValueError: no &lt;order&gt;</summary>' in page
    assert "File &quot;shop/jobs.py&quot;, line 3, in send" in page  # escaped, never markup


def test_the_attempt_history_comes_right_after_status_attempts_and_the_last_error(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD, payload={"order": 42}, last_error="ValueError: card declined")

    page = body(operator_client.get(page_url(job)))

    markers = ("field-status_display", "field-attempts_display", "field-last_error", 'id="attempt_set-group"',
               "field-payload_pretty", "field-submitted_by")  # fmt: skip
    order = [page.index(marker) for marker in markers]
    assert order == sorted(order), order


def test_the_job_page_writes_its_times_to_the_second_and_when_a_retry_runs(operator_client: Client) -> None:
    job = job_in(JobStatus.PENDING, attempts=1, last_error="TransientError: try again")
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now() + dt.timedelta(seconds=42))
    job.refresh_from_db()

    page = text(body(operator_client.get(page_url(job))))

    local = timezone.localtime(job.run_at)
    assert f"{local:%Y-%m-%d %H:%M:%S}" in page
    assert re.search(r"in 4[012]\.\d+s \(the next attempt, after a failure\)", page), page
    assert f"{timezone.localtime(job.created_at):%Y-%m-%d %H:%M:%S}" in page
