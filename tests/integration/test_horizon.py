"""Early warning: a transaction holding a snapshot shows in the metrics, in reliableq_stats and on
the admin dashboard, and dead rows in the queue's tables are counted."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

import reliableq
from reliableq.models import Job
from reliableq.queue import horizon
from testproject import accounts
from tests.support import wait_until

from .helpers import raw_connect

pytestmark = pytest.mark.django_db(transaction=True)


def metric(body: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == name
    }


def test_a_held_snapshot_shows_in_metrics_stats_and_the_dashboard(settings):
    settings.RELIABLEQ = {**settings.RELIABLEQ, "XMIN_WARNING_SECONDS": 1}
    operator = accounts.grant(User.objects.create_user("ops", is_staff=True), "reliableq.view_job")
    client = Client()
    client.force_login(operator)
    assert horizon.horizon().age_seconds < 1

    with raw_connect() as report:  # a REPEATABLE READ report that reads once and then stays open
        report.execute("SET application_name = 'nightly-report'")
        report.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        report.execute("SELECT count(*) FROM reliableq_job")
        wait_until(lambda: horizon.horizon().age_seconds > 1.5, timeout=30, what="the snapshot to age")

        held = horizon.horizon()
        assert "nightly-report" in held.holder and held.age_xids >= 0
        scraped = metric(client.get("/v1/metrics").content.decode(), "reliableq_xmin_horizon_age_seconds")
        assert scraped[()] > 1.5
        out = StringIO()
        call_command("reliableq_stats", stdout=out)
        assert "xmin horizon:" in out.getvalue() and "nightly-report" in out.getvalue()
        page = client.get("/admin/reliableq/queuedashboard/").content.decode()
        assert 'id="xmin-warning"' in page and "nightly-report" in page
        report.execute("ROLLBACK")

    wait_until(lambda: horizon.horizon().age_seconds < 1, timeout=30, what="the horizon to move on")
    assert 'id="xmin-warning"' not in client.get("/admin/reliableq/queuedashboard/").content.decode()


def test_dead_rows_of_the_queue_tables_are_counted():
    jobs = reliableq.enqueue_many("demo.noop", [{} for _ in range(50)])
    Job.objects.filter(pk__in=jobs).update(priority=1)  # 50 dead row versions
    wait_until(lambda: horizon.dead_tuples()["reliableq_job"] >= 50, timeout=30, what="the statistics to count them")
    body = Client()
    body.force_login(accounts.grant(User.objects.create_user("ops"), "reliableq.view_job"))
    scraped = metric(body.get("/v1/metrics").content.decode(), "reliableq_dead_tuples")
    assert scraped[(("table", "reliableq_job"),)] >= 50
    assert set(dict(k)["table"] for k in scraped) == set(horizon.TABLES)
