"""GET /v1/queues, POST /v1/queues/<name>/pause and /resume: the queue's state over HTTP, audited,
for holders of reliableq.pause_queue only; and /v1/stats counting paused and throttled work."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connection

import reliableq
from reliableq import registry, services
from reliableq.models import JobStatus, QueueState
from testproject.jobs import capped, per_key

from .conftest import PAUSE, VIEW, problem_of
from .jobs import fresh_queue, job_in

pytestmark = pytest.mark.django_db


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def queue_doc(api, name: str) -> dict:
    (found,) = [q for q in api.get("/v1/queues").json()["queues"] if q["name"] == name]
    return found


def audit_of(name: str) -> list[str]:
    entries = LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(QueueState), object_id=name)
    return [e.get_change_message() for e in entries.order_by("pk")]


# -- GET /v1/queues --------------------------------------------------------------------------


def test_queues_list_every_queue_with_jobs_or_a_pause_state_and_its_counts(api):
    queue = fresh_queue()
    job_in(JobStatus.RUNNING, queue=queue)
    late = job_in(JobStatus.PENDING, queue=queue)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE reliableq_job SET run_at = now() - interval '90 seconds' WHERE id = %s", [late.id])
    job_in(JobStatus.PENDING, queue=queue, run_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1))
    finished_only = job_in(JobStatus.DEAD).queue
    services.pause("idle-but-paused")

    response = api.get("/v1/queues")

    assert response.status_code == 200, response.content
    by_name = {q["name"]: q for q in response.json()["queues"]}
    assert list(by_name) == sorted(by_name)
    assert by_name[queue] == {
        "name": queue,
        "paused": False,
        "paused_until": None,
        "paused_by": None,
        "pending": 2,
        "running": 1,
        "oldest_due_age_seconds": by_name[queue]["oldest_due_age_seconds"],
    }
    assert 90 <= by_name[queue]["oldest_due_age_seconds"] < 150
    assert by_name[finished_only]["pending"] == by_name[finished_only]["running"] == 0
    assert by_name["idle-but-paused"]["paused"] is True


def test_queues_refuse_unknown_query_parameters(api):
    body = problem_of(api.get("/v1/queues?paused=1"), 400)
    assert "paused" in body["errors"]


# -- pause and resume ------------------------------------------------------------------------


def test_pause_until_a_time_answers_the_paused_queue_and_is_audited(api, operator):
    queue = fresh_queue()
    job_in(JobStatus.PENDING, queue=queue)
    until = (db_now() + dt.timedelta(hours=1)).replace(microsecond=0)

    response = api.post(f"/v1/queues/{queue}/pause", {"until": until.isoformat()}, format="json")

    assert response.status_code == 200, response.content
    doc = response.json()
    assert doc["paused"] is True and doc["paused_by"] == operator.username and doc["pending"] == 1
    assert dt.datetime.fromisoformat(doc["paused_until"].replace("Z", "+00:00")) == until
    assert queue in services.paused_queues()
    assert audit_of(queue) == [f"Paused until {until.isoformat()}"]
    assert queue_doc(api, queue) == doc


def test_pause_without_a_body_holds_until_resumed_and_resume_lets_it_run(api):
    queue = fresh_queue()

    paused = api.post(f"/v1/queues/{queue}/pause")
    assert paused.status_code == 200, paused.content
    assert paused.json()["paused"] is True and paused.json()["paused_until"] is None

    resumed = api.post(f"/v1/queues/{queue}/resume")
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["paused"] is False and resumed.json()["paused_by"] is None
    assert queue not in services.paused_queues()
    assert audit_of(queue) == ["Paused", "Resumed."]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"until": "tomorrow"}, "until"),
        ({"until": "2030-01-01T12:00:00"}, "until"),  # naive: ambiguous
        ({"until": 1893456000}, "until"),
        ({"until": "9999-12-31T00:00:00Z"}, "until"),  # beyond MAX_SCHEDULE_SECONDS
        ({"for": "1h"}, "for"),
        ([], "non_field_errors"),
    ],
)
def test_a_bad_pause_body_is_400_and_pauses_nothing(api, body, field):
    queue = fresh_queue()

    problem = problem_of(api.post(f"/v1/queues/{queue}/pause", body, format="json"), 400)

    assert field in problem["errors"], problem
    assert not QueueState.objects.filter(name=queue).exists()


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_a_bad_queue_name_is_400(api, action):
    problem = problem_of(api.post(f"/v1/queues/{'x' * 101}/{action}"), 400)
    assert "queue" in problem["errors"]
    problem_of(api.post(f"/v1/queues/a%20b/{action}"), 400)
    assert not QueueState.objects.exists()


def test_resume_takes_no_fields(api):
    problem = problem_of(api.post("/v1/queues/mail/resume", {"until": None}, format="json"), 400)
    assert "until" in problem["errors"]


def test_a_stranger_without_pause_queue_is_refused_and_changes_nothing(make_client):
    queue = fresh_queue()
    services.pause(queue)
    viewer = make_client(VIEW)

    problem_of(viewer.post(f"/v1/queues/{queue}/resume"), 403)
    problem_of(viewer.post("/v1/queues/other/pause"), 403)

    assert services.paused_queues() == {queue}
    assert audit_of(queue) == [] and audit_of("other") == []


def test_listing_queues_needs_view_job(make_client, anon):
    problem_of(make_client(PAUSE).get("/v1/queues"), 403)
    problem_of(anon.get("/v1/queues"), 401)
    problem_of(anon.post("/v1/queues/mail/pause"), 401)
    assert make_client(VIEW).get("/v1/queues").status_code == 200


# -- /v1/stats: paused and throttled ---------------------------------------------------------


@pytest.fixture
def limited_kinds():
    """test.capped (max_running=2) and test.per_key (max_running_per_key=2), as the workers of
    the flow-control tests register them; the registry is put back as it was afterwards (other
    test modules register these kinds when they are imported)."""
    saved = dict(registry._handlers)
    reliableq.handler("test.capped", max_running=2)(capped)
    reliableq.handler("test.per_key", max_running_per_key=2)(per_key)
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


def test_stats_count_due_work_of_paused_queues_and_work_a_limit_holds_back(api, limited_kinds):
    paused = fresh_queue()
    for _ in range(3):
        reliableq.enqueue("demo.noop", {}, queue=paused)
    reliableq.enqueue("demo.noop", {}, queue=paused, run_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1))
    services.pause(paused)

    capped_queue = fresh_queue()
    for _ in range(5):
        reliableq.enqueue("test.capped", {}, queue=capped_queue)
    keyed = fresh_queue()
    for key in ("a", "a", "a", "b"):
        reliableq.enqueue("test.per_key", {}, queue=keyed, concurrency_key=key)
    from reliableq import queue as jobqueue

    def claim(queue: str, n: int) -> None:
        claimed, _ = jobqueue.claim(
            worker_id="w", queues=[queue], limit=n, lease_seconds=30, limits=registry.limits(), rescue=False
        )
        assert len(claimed) == n

    claim(capped_queue, 2)  # the cap is reached: 3 due ones are held back
    before = api.get("/v1/stats").json()
    assert before["paused"] == 3
    assert before["throttled"] == 3

    claim(keyed, 3)  # a, a, b run: the third "a" is held back, nothing of "b" waits
    stats = api.get("/v1/stats").json()
    assert stats["paused"] == 3
    assert stats["throttled"] == 3 + 1

    services.resume(paused)
    assert api.get("/v1/stats").json()["paused"] == 0


def test_metrics_export_paused_and_throttled_work_and_each_queues_pause_state(api):
    from prometheus_client.parser import text_string_to_metric_families

    paused, running = fresh_queue(), fresh_queue()
    reliableq.enqueue("demo.noop", {}, queue=paused)
    reliableq.enqueue("demo.noop", {}, queue=running)
    services.pause(paused)

    response = api.get("/v1/metrics")

    assert response.status_code == 200
    families = text_string_to_metric_families(response.content.decode())
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    assert samples[("reliableq_paused_jobs", ())] == 1
    assert samples[("reliableq_throttled_jobs", ())] == 0
    assert samples[("reliableq_queue_paused", (("queue", paused),))] == 1
    assert samples[("reliableq_queue_paused", (("queue", running),))] == 0


def test_a_rated_kind_whose_window_is_full_counts_as_throttled(api):
    from reliableq import queue as jobqueue
    from testproject.jobs import rated

    saved = dict(registry._handlers)
    registry._handlers.pop("test.rated", None)  # registered with 10/s where the flow tests are imported
    reliableq.handler("test.rated", rate_limit="2/h")(rated)
    try:
        queue = fresh_queue()
        for _ in range(5):
            reliableq.enqueue("test.rated", {}, queue=queue)
        claimed, _ = jobqueue.claim(
            worker_id="w", queues=[queue], limit=5, lease_seconds=30, limits=registry.limits(), rescue=False
        )
        assert len(claimed) == 2  # the window's N
        assert api.get("/v1/stats").json()["throttled"] == 3
    finally:
        registry._handlers.clear()
        registry._handlers.update(saved)


@pytest.mark.parametrize("query", ["after=a%0A", "after=" + "x" * 101, "page_size=0", "page_size=501", "page_size=x"])
def test_a_bad_page_of_queues_is_400(api, query):
    problem_of(api.get(f"/v1/queues?{query}"), 400)


def test_queues_come_a_page_at_a_time_and_every_page_costs_its_own_names(api):
    for n in range(5):
        reliableq.enqueue("demo.noop", {}, queue=f"q{n}")
    first = api.get("/v1/queues?page_size=2").json()
    second = api.get(first["next"]).json()
    third = api.get(second["next"]).json()

    assert [q["name"] for q in first["queues"]] == ["q0", "q1"]
    assert [q["name"] for q in second["queues"]] == ["q2", "q3"]
    assert [q["name"] for q in third["queues"]] == ["q4"] and third["next"] is None
