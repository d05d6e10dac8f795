"""Issue 25, points 1 and 2: what one submitter can create is bounded.

Each attack goes over real HTTP to a live gunicorn: queue names no worker serves (a flood that
made the dashboard 249 MB), an unbounded backlog, a throttle that counted a batch of 1,000 as one
request, and a client-chosen priority that ran one user's backlog ahead of everybody's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command

import reliableq
from reliableq import services
from reliableq.api.throttles import DEFAULT_RATE
from reliableq.metrics import MAX_QUEUE_SERIES
from reliableq.models import Job, JobStatus
from reliableq.queue import stats

from .conftest import PASSWORD, admin_session, problem, start_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = "reliableq.submit_job"
NOOP = {"kind": "demo.noop", "payload": {}}


def batch(*jobs: dict) -> dict:
    return {"jobs": list(jobs)}


# -- HTTP_QUEUES ------------------------------------------------------------------------------


def test_by_default_http_submitters_use_only_the_default_queue(client_of):
    attacker = client_of("attacker", SUBMIT)

    single = problem(attacker.submit({**NOOP, "queue": "spam-0-0"}), 400)
    flood = problem(
        attacker.request("POST", "/v1/jobs/batch", json=batch(NOOP, {**NOOP, "queue": "spam-0-1"}, NOOP)), 400
    )

    assert "HTTP_QUEUES" in single["errors"]["queue"][0]
    assert list(flood["errors"]) == ["jobs[1].queue"], flood["errors"]
    assert not Job.objects.exists()
    assert attacker.submit(NOOP).status_code == 202  # the default queue is open


def test_a_site_names_the_queues_it_opens_to_http(client_of, db_url: str, tmp_path: Path):
    site = start_site(tmp_path, db_url, workers=1, RELIABLEQ_HTTP_QUEUES='["default", "reports"]')
    try:
        user = client_of("ada", SUBMIT)
        user.site = site
        answers = [user.submit({**NOOP, "queue": q}).status_code for q in ("reports", "default", "other")]
    finally:
        site_stop(site)
    assert answers == [202, 202, 400]
    assert sorted(Job.objects.values_list("queue", flat=True)) == ["default", "reports"]


def site_stop(site) -> None:
    from testproject import processes

    processes.stop(site.process)


# -- a site that opens every queue: what the operator's views show stays bounded ----------------


def test_thousands_of_queue_names_leave_the_dashboard_queues_and_metrics_bounded(client_of, db_url, tmp_path):
    """The flood of the issue, at 3,000 names (3 batches of 1,000) on a site with HTTP_QUEUES ["*"]."""
    site = start_site(
        tmp_path,
        db_url,
        workers=1,
        RELIABLEQ_HTTP_QUEUES='["*"]',
        TESTPROJECT_SUBMIT_RATE="100000/d",
        TESTPROJECT_THROTTLE_RATES='{"reliableq_read": "100000/d"}',
    )
    try:
        attacker = client_of("attacker", SUBMIT)
        attacker.site = site
        for b in range(3):
            sent = attacker.request(
                "POST", "/v1/jobs/batch", json=batch(*({**NOOP, "queue": f"spam-{b}-{i:04d}"} for i in range(1000)))
            )
            assert sent.status_code == 202, sent.text[:300]
        operator = client_of("olga", "reliableq.view_job", "reliableq.pause_queue", password=PASSWORD)
        operator.site = site

        first = operator.request("GET", "/v1/queues")
        names = [q["name"] for q in first.json()["queues"]]
        pages = 1
        following = first.json()["next"]
        while following:
            page = operator.session.get(following, headers={"Authorization": f"Token {operator.token}"}, timeout=30)
            assert page.status_code == 200, page.text[:300]
            names += [q["name"] for q in page.json()["queues"]]
            following = page.json()["next"]
            pages += 1
        oversized = operator.request("GET", "/v1/queues?page_size=501")

        session = admin_session(site, "olga")
        dashboard = session.get(f"{site.url}/admin/reliableq/queuedashboard/", timeout=60)
        later = session.get(f"{site.url}/admin/reliableq/queuedashboard/?queues_after=spam-0-0049", timeout=60)
        scrape = operator.request("GET", "/v1/metrics")
    finally:
        site_stop(site)

    assert len(first.json()["queues"]) == stats.QUEUE_PAGE
    assert pages == 30 and len(names) == 3000 == len(set(names)) and names == sorted(names)
    problem(oversized, 400)
    assert dashboard.status_code == 200
    assert dashboard.text.count('<tr id="queue-') == 50
    assert len(dashboard.content) < 300_000, len(dashboard.content)
    assert 'id="queues-next"' in dashboard.text
    assert 'id="queue-spam-0-0050"' in later.text and 'id="queue-spam-0-0049"' not in later.text
    series = re.findall(r"^reliableq_queue_paused\{", scrape.text, re.M)
    assert len(series) == MAX_QUEUE_SERIES, len(series)
    assert re.search(r"^reliableq_queue_series_truncated 1\.0$", scrape.text, re.M)
    assert len(scrape.content) < 100_000, len(scrape.content)


def test_an_operator_lists_queues_a_page_at_a_time_and_purges_a_flood(capsys):
    for b in range(3):
        reliableq.enqueue_many("demo.noop", [{}] * 5, queue=f"spam-{b}")
    services.cancel(Job.objects.filter(queue="spam-2").first().id)

    call_command("reliableq_queue", "list", "--limit", "2")
    listing = capsys.readouterr().out
    call_command("reliableq_queue", "purge", "spam-0", "--dry-run")
    dry = capsys.readouterr().out
    unchanged = Job.objects.filter(queue="spam-0", status=JobStatus.PENDING).count()
    call_command("reliableq_queue", "purge", "spam-0")
    cancelled = capsys.readouterr().out
    call_command("reliableq_queue", "purge", "spam-1", "--delete")
    deleted = capsys.readouterr().out

    assert "spam-0" in listing and "spam-1" in listing and "spam-2" not in listing
    assert "reliableq_queue list --after spam-1" in listing
    assert "Would cancel 5 PENDING job(s) of queue spam-0" in dry and unchanged == 5
    assert "Cancelled 5 PENDING job(s)" in cancelled
    assert set(Job.objects.filter(queue="spam-0").values_list("status", flat=True)) == {JobStatus.CANCELLED}
    assert "Deleted 5 PENDING job(s)" in deleted and not Job.objects.filter(queue="spam-1").exists()
    # Finished jobs of a queue are not a purge's: the cancelled one stays as it was.
    assert Job.objects.filter(queue="spam-2", status=JobStatus.CANCELLED).count() == 1


# -- MAX_PENDING_PER_SUBMITTER ----------------------------------------------------------------


def test_a_submitter_holds_at_most_its_bound_of_unfinished_jobs(client_of, db_url: str, tmp_path: Path):
    site = start_site(tmp_path, db_url, workers=1, RELIABLEQ_MAX_PENDING_PER_SUBMITTER="5")
    try:
        hoarder, other = client_of("hoarder", SUBMIT), client_of("other", SUBMIT)
        hoarder.site = other.site = site
        keyed = hoarder.submit(NOOP, key="order-1")
        three = [hoarder.submit({**NOOP, "payload": {"n": i}}).status_code for i in range(3)]
        too_big = hoarder.request("POST", "/v1/jobs/batch", json=batch(NOOP, NOOP))
        fifth = hoarder.submit(NOOP)
        sixth = hoarder.submit(NOOP)
        resent = hoarder.submit(NOOP, key="order-1")  # at the bound, a resend still finds its job
        theirs = other.submit(NOOP)
        # Once some have finished, there is room again.
        for job in Job.objects.filter(submitted_by="hoarder")[:2]:
            services.cancel(job.id)
        after = hoarder.request("POST", "/v1/jobs/batch", json=batch(NOOP, NOOP))
    finally:
        site_stop(site)

    assert keyed.status_code == 202 and three == [202, 202, 202] and fifth.status_code == 202
    for refused in (too_big, sixth):
        body = problem(refused, 429)
        assert "MAX_PENDING_PER_SUBMITTER" in body["detail"], body
        assert int(refused.headers["Retry-After"]) > 0
    assert resent.status_code == 200 and resent.json()["id"] == keyed.json()["id"]
    assert theirs.status_code == 202
    assert after.status_code == 202, after.text
    assert Job.objects.filter(submitted_by="hoarder").count() == 7


# -- the throttle counts jobs -----------------------------------------------------------------


def test_a_batch_of_n_counts_n_against_the_submit_rate(client_of, db_url: str, tmp_path: Path):
    """The issue's attack: at 5 a window, a second user's five batches of 1,000 were all accepted."""
    site = start_site(tmp_path, db_url, workers=1, TESTPROJECT_SUBMIT_RATE="5/d")  # no run straddles a day
    try:
        single, batcher = client_of("single", SUBMIT), client_of("batcher", SUBMIT)
        single.site = batcher.site = site
        singles = [single.submit(NOOP).status_code for _ in range(6)]
        whole = batcher.request("POST", "/v1/jobs/batch", json=batch(*[NOOP] * 1000))
        four = batcher.request("POST", "/v1/jobs/batch", json=batch(*[NOOP] * 4))
        two = batcher.request("POST", "/v1/jobs/batch", json=batch(NOOP, NOOP))
        one = batcher.request("POST", "/v1/jobs/batch", json=batch(NOOP))
        then = batcher.submit(NOOP)
    finally:
        site_stop(site)

    assert singles == [202] * 5 + [429]
    assert "5/d" in problem(whole, 413)["detail"] and "Retry-After" not in whole.headers  # no window admits it
    assert four.status_code == 202
    problem(two, 429)
    assert int(two.headers["Retry-After"]) > 0
    assert one.status_code == 202
    problem(then, 429)
    assert Job.objects.filter(submitted_by="batcher").count() == 5


def test_the_default_rate_admits_one_full_batch_and_invalid_batches_count_too(client_of):
    batcher = client_of("batcher", SUBMIT)
    assert int(DEFAULT_RATE.split("/")[0]) >= 1000

    full = batcher.request("POST", "/v1/jobs/batch", json=batch(*[NOOP] * 1000))

    assert full.status_code == 202, full.text[:300]
    assert Job.objects.count() == 1000


def test_an_invalid_batch_is_counted_before_its_items_are_checked(client_of, db_url: str, tmp_path: Path):
    site = start_site(tmp_path, db_url, workers=1, TESTPROJECT_SUBMIT_RATE="5/d")
    try:
        sender = client_of("sender", SUBMIT)
        sender.site = site
        bad = sender.request("POST", "/v1/jobs/batch", json=batch(*[{"kind": "no.such"}] * 5))
        after = sender.submit(NOOP)
    finally:
        site_stop(site)
    problem(bad, 400)
    problem(after, 429)
    assert not Job.objects.exists()


# -- priority ---------------------------------------------------------------------------------


def test_an_http_client_cannot_run_its_jobs_ahead_of_the_default_priority(client_of):
    """Bounded for HTTP: 0 (the default) to 1000. The issue's -1000 held another user's job back 66 s."""
    attacker = client_of("attacker", SUBMIT)

    urgent = problem(attacker.submit({**NOOP, "priority": -1000}), 400)
    in_batch = problem(attacker.request("POST", "/v1/jobs/batch", json=batch(NOOP, {**NOOP, "priority": -1})), 400)
    later = attacker.submit({**NOOP, "priority": 1000})

    assert "nothing submitted over HTTP runs ahead of the default" in urgent["errors"]["priority"][0]
    assert list(in_batch["errors"]) == ["jobs[1].priority"]
    assert later.status_code == 202
    assert list(Job.objects.values_list("priority", flat=True)) == [1000]
    # Code keeps the whole range: an operator's own job may still jump the line.
    assert reliableq.enqueue("demo.noop", {}, priority=-1000).priority == -1000
