"""Attack 4: resources without bounds (deep payloads, far run_at, floods, thousands of queues,
arbitrary admin lookups, a select-across over the whole table)."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest

import reliableq
from reliableq import rules
from reliableq.admin import MAX_QUEUE_CHOICES
from reliableq.models import Job, JobStatus
from reliableq.queue import db
from testproject import processes

from .conftest import PASSWORD, admin_session, csrf_of, problem, start_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = "reliableq.submit_job"
OPERATOR = ("reliableq.view_job", "reliableq.replay_job", "reliableq.cancel_job")


def nested(depth: int) -> dict:
    """A payload whose innermost object is `depth` levels deep (the payload itself is level 1)."""
    value: dict = {"leaf": True}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def nested_json(depth: int) -> str:
    """The same payload as JSON text, written out without recursion (a traced test process, under
    coverage, cannot json.dumps() 950 levels)."""
    return '{"n":' * (depth - 1) + '{"leaf":true}' + "}" * (depth - 1)


def test_a_payload_nested_past_64_levels_is_400_and_64_is_accepted(client_of):
    attacker = client_of("attacker", SUBMIT)
    # 950 deep may already stop the JSON parser (how deep it gets depends on the server's stack):
    # a 400 about nesting either way.
    deep = attacker.request("POST", "/v1/jobs", data='{"kind":"demo.noop","payload":' + nested_json(950) + "}",
                            headers={"Content-Type": "application/json"})  # fmt: skip
    assert "nested" in problem(deep, 400)["detail"]
    body = problem(attacker.submit({"kind": "demo.noop", "payload": nested(rules.MAX_PAYLOAD_DEPTH + 1)}), 400)
    assert "nested more than 64 levels" in body["errors"]["payload"][0]
    assert not Job.objects.exists()
    assert attacker.submit({"kind": "demo.noop", "payload": nested(rules.MAX_PAYLOAD_DEPTH)}).status_code == 202


def test_the_admin_shows_a_deep_payload_stored_before_the_bound_without_failing(client_of, site):
    """A row written directly (or before this release) with a 950-deep payload: its page answers 200."""
    client_of("olga", *OPERATOR, password=PASSWORD)
    job = reliableq.enqueue("demo.noop", {})
    with db.cursor() as cursor:
        cursor.execute("UPDATE reliableq_job SET payload = %s::jsonb WHERE id = %s", [nested_json(950), job.id])
    page = admin_session(site, "olga").get(f"{site.url}/admin/reliableq/job/{job.id}/change/", timeout=30)
    assert page.status_code == 200, page.text[:500]


def test_run_at_beyond_a_year_is_400_and_in_the_distant_past_means_now(client_of):
    attacker = client_of("attacker", SUBMIT, "reliableq.view_job")
    far = problem(attacker.submit({"kind": "demo.noop", "payload": {}, "run_at": "9999-12-31T00:00:00Z"}), 400)
    assert "MAX_SCHEDULE_SECONDS" in far["errors"]["run_at"][0]
    assert not Job.objects.exists()

    ancient = attacker.submit({"kind": "demo.noop", "payload": {}, "run_at": "0001-01-01T00:00:00Z"})
    assert ancient.status_code == 202, ancient.text
    job = Job.objects.get(pk=ancient.json()["id"])
    assert job.run_at == job.created_at, "a past run_at is stored as the time of the INSERT"
    stats = attacker.request("GET", "/v1/stats").json()
    assert stats["oldest_due_pending_age_seconds"] < 600, stats


def test_submissions_past_the_rate_are_429_problems_with_retry_after(client_of, db_url: str, tmp_path: Path):
    throttled = start_site(
        tmp_path, db_url, workers=1, TESTPROJECT_SUBMIT_RATE="3/d"
    )  # a window that no run of this test straddles
    try:
        flooder = client_of("flooder", SUBMIT)
        flooder.site = throttled
        # One gunicorn process holds the counts (LocMemCache is per process): send the flood to it.
        answers = [flooder.submit({"kind": "demo.noop", "payload": {"n": i}}) for i in range(5)]
    finally:
        processes.stop(throttled.process)
    assert [a.status_code for a in answers[:3]] == [202, 202, 202]
    for answer in answers[3:]:
        body = problem(answer, 429)
        assert int(answer.headers["Retry-After"]) > 0
        assert "throttled" in body["detail"].lower(), body
    assert Job.objects.count() == 3


def test_the_queue_filter_lists_a_bounded_number_of_queues(client_of, site):
    client_of("olga", *OPERATOR, password=PASSWORD)
    for n in range(200):
        reliableq.enqueue("demo.noop", {}, queue=f"q{n:03d}-{uuid.uuid4().hex}")
    session = admin_session(site, "olga")

    page = session.get(f"{site.url}/admin/reliableq/job/", timeout=30)
    chosen = session.get(
        f"{site.url}/admin/reliableq/job/?queue=" + Job.objects.order_by("-queue")[0].queue, timeout=30
    )

    assert page.status_code == 200
    listed = page.text.count("?queue=q")
    assert listed == MAX_QUEUE_CHOICES, listed
    assert len(page.content) < 200_000, len(page.content)
    assert chosen.status_code == 200 and "1 job" in chosen.text.replace("\n", " ")


@pytest.mark.parametrize(
    "query",
    ["payload__blob__icontains=x", "last_error__regex=.*", "worker_id__startswith=w", "submitted_by__startswith=a"],
)
def test_the_admin_refuses_lookups_other_than_its_filters(client_of, site, query):
    client_of("olga", *OPERATOR, password=PASSWORD)
    session = admin_session(site, "olga")
    refused = session.get(f"{site.url}/admin/reliableq/job/?{query}", timeout=30)
    assert refused.status_code == 400, (refused.status_code, refused.text[:300])
    allowed = session.get(
        f"{site.url}/admin/reliableq/job/?status__exact=DEAD&kind=demo.noop&queue=default", timeout=30
    )
    assert allowed.status_code == 200


def test_a_select_across_replay_is_capped_and_changes_nothing(client_of, site):
    client_of("olga", *OPERATOR, password=PASSWORD)
    dead = reliableq.enqueue_many("demo.noop", [{"n": i} for i in range(501)])
    Job.objects.filter(pk__in=dead).update(status=JobStatus.DEAD, finished_at=dt.datetime.now(dt.timezone.utc))
    session = admin_session(site, "olga")
    token = csrf_of(session, site, "/admin/reliableq/job/?status__exact=DEAD")

    answer = session.post(
        f"{site.url}/admin/reliableq/job/?status__exact=DEAD",
        timeout=60,
        data={
            "csrfmiddlewaretoken": token,
            "action": "replay_selected",
            "select_across": "1",
            "index": "0",
            "_selected_action": [str(dead[0])],
        },
        headers={"Referer": site.url + "/admin/reliableq/job/"},
    )

    assert answer.status_code == 200
    assert len(answer.content) < 300_000, "no page that lists every selected job"
    assert "at most 500 at a time" in answer.text
    assert Job.objects.filter(status=JobStatus.DEAD).count() == 501
