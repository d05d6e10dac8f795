"""What operators scrape and call: /metrics, /v1/ready and manage.py reliableq_stats."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from reliableq import queue as jobqueue
from reliableq.models import Outcome
from reliableq.queue import db, health
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer() -> APIClient:
    user = User.objects.create(username="prometheus")
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client = APIClient()
    client.force_authenticate(user)
    return client


def some_history() -> None:
    JobFactory.create_batch(2, kind="demo.noop")
    JobFactory(kind="test.permanent", status="DEAD", finished_at="2030-01-01T00:00:00Z", last_error="x")
    jobs, _ = jobqueue.claim(worker_id="w1", queues=["default"], limit=1, lease_seconds=30)
    jobqueue.finish(
        [
            jobqueue.Finish(
                job_id=jobs[0].id, lease_token=jobs[0].lease_token, status="SUCCEEDED", outcome=Outcome.SUCCEEDED
            )
        ]
    )


def test_metrics_export_jobs_attempts_losses_and_durations(viewer: APIClient) -> None:
    some_history()
    response = viewer.get("/v1/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("reliableq_jobs", (("kind", "demo.noop"), ("status", "PENDING")))] == 1
    assert samples[("reliableq_jobs", (("kind", "demo.noop"), ("status", "SUCCEEDED")))] == 1
    assert samples[("reliableq_dead_jobs", ())] == 1
    assert samples[("reliableq_oldest_due_job_age_seconds", ())] >= 0
    assert samples[("reliableq_attempts_total", (("outcome", "SUCCEEDED"),))] == 1
    assert ("reliableq_lease_losses_total", (("reason", "expired"),)) in samples
    assert samples[("reliableq_handler_duration_seconds_count", (("kind", "demo.noop"),))] == 1
    assert samples[("reliableq_handler_duration_seconds_bucket", (("kind", "demo.noop"), ("le", "+Inf")))] == 1


def test_metrics_need_view_job() -> None:
    assert APIClient().get("/v1/metrics").status_code == 401
    client = APIClient()
    client.force_authenticate(User.objects.create(username="nobody"))
    assert client.get("/v1/metrics").status_code == 403


def test_ready_answers_anonymous_callers_when_the_database_is_migrated() -> None:
    response = APIClient().get("/v1/ready")
    assert response.status_code == 200 and response.json() == {"status": "ready"}


def test_ready_reports_unapplied_migrations(monkeypatch: pytest.MonkeyPatch) -> None:
    call_command("migrate", "reliableq", "0001", database=db.alias(), verbosity=0)
    monkeypatch.setattr(health, "_migrated", False)
    try:
        response = APIClient().get("/v1/ready")
        assert response.status_code == 503
        assert "migration" in response.json()["detail"]
        assert response.json()["detail"].endswith("migrate" if db.alias() == "default" else f"--database {db.alias()}")
    finally:
        call_command("migrate", database=db.alias(), verbosity=0)


def test_reliableq_stats_prints_the_same_figures_as_a_table() -> None:
    some_history()
    out = StringIO()
    call_command("reliableq_stats", stdout=out)
    text = out.getvalue()
    assert "demo.noop" in text and "DEAD jobs: 1" in text and "oldest due PENDING job waited" in text
    assert "SUCCEEDED 1" in text
