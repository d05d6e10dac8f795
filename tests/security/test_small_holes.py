"""Issue 25, points 4, 5, 7 and 8: names with a trailing newline, a stale cancel request, NUL in
lookups and tokens, and the smaller findings fixed while there. Each over real HTTP where it has a
way in over HTTP."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import requests
from django.contrib.admin.models import LogEntry
from django.utils import timezone
from rest_framework.test import APIClient

import reliableq
from charges.models import ChargeRequest
from reliableq import queue as jobqueue
from reliableq.models import Job, JobStatus, QueueState
from testproject import accounts, processes
from tests.api.jobs import claim_one, finish, job_in

from .conftest import PASSWORD, admin_session, problem, start_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = "reliableq.submit_job"
NOOP = {"kind": "demo.noop", "payload": {}}


# -- 4: names with a trailing newline ---------------------------------------------------------


def test_a_queue_name_with_a_trailing_newline_is_refused_everywhere(client_of, db_url: str, tmp_path: Path):
    site = start_site(tmp_path, db_url, workers=1, RELIABLEQ_HTTP_QUEUES='["*"]')
    try:
        user = client_of("ada", SUBMIT, "reliableq.pause_queue")
        user.site = site
        single = user.submit({**NOOP, "queue": "q2\n"})
        in_batch = user.request("POST", "/v1/jobs/batch", json={"jobs": [{**NOOP, "queue": "default\n"}]})
        pause = user.request("POST", "/v1/queues/default%0A/pause")
    finally:
        processes.stop(site.process)
    problem(single, 400)
    problem(in_batch, 400)
    assert pause.status_code in (400, 404), pause.status_code
    assert not Job.objects.exists() and not QueueState.objects.exists()
    with pytest.raises(reliableq.InvalidJob):
        reliableq.enqueue("demo.noop", {}, queue="default\n")


# -- 5: replay clears a stale cancel request --------------------------------------------------


def test_a_replayed_job_does_not_inherit_the_cancel_asked_of_its_last_run(client_of):
    operator = client_of("olga", "reliableq.view_job", "reliableq.replay_job", "reliableq.cancel_job")
    running = job_in(JobStatus.RUNNING)
    asked = operator.request("POST", f"/v1/jobs/{running.id}/cancel")
    claimed_token = Job.objects.get(pk=running.id).lease_token
    # The handler ignored the request and failed for good: DEAD, still marked as asked.
    claimed = type("Claimed", (), {"id": running.id, "lease_token": claimed_token})()
    finish(claimed, JobStatus.DEAD, "FAILED_PERMANENT", "permanent: gave up")
    assert Job.objects.get(pk=running.id).cancel_requested_at is not None

    replayed = operator.request("POST", f"/v1/jobs/{running.id}/replay")

    assert asked.status_code == 202
    assert replayed.status_code == 202 and replayed.json()["cancel_requested"] is False
    job = Job.objects.get(pk=running.id)
    assert job.status == JobStatus.PENDING and job.cancel_requested_at is None
    # Its next run is an ordinary one: its worker's renewal finds no cancel request.
    rerun = claim_one(job.queue)
    assert jobqueue.renew([(rerun.id, rerun.lease_token)], lease_seconds=30) == {rerun.id: False}


# -- 7: NUL -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ["queue=%00", "kind=%00", "status__exact=%00", "q=%00", "queue=a%00b", "waiting_for=a%00b"]
)
def test_nul_in_the_admins_filters_is_a_400_not_a_500(client_of, site, query):
    client_of("olga", "reliableq.view_job", password=PASSWORD)
    session = admin_session(site, "olga")

    answer = session.get(f"{site.url}/admin/reliableq/job/?{query}", timeout=30)

    assert answer.status_code == 400, (answer.status_code, answer.text[:300])
    assert "Traceback" not in site.output() and "DataError" not in site.output()


def test_nul_in_a_token_is_a_401_over_http_and_in_process(site, client_of):
    client_of("ada", SUBMIT)
    for header in ("Token a\x00", "Token " + "0" * 39 + "\x00"):
        over_http = requests.get(site.url + "/v1/stats", headers={"Authorization": header}, timeout=30)
        assert over_http.status_code in (400, 401), over_http.status_code  # gunicorn may refuse the header first
        in_process = APIClient().get("/v1/stats", HTTP_AUTHORIZATION=header)
        assert in_process.status_code == 401, in_process.content[:300]
    too_long = APIClient().get("/v1/stats", HTTP_AUTHORIZATION="Token " + "a" * 10_000)
    assert too_long.status_code == 401


# -- 8: the smaller findings --------------------------------------------------------------------


def test_asking_twice_to_cancel_a_running_job_writes_one_audit_entry(client_of):
    operator = client_of("olga", "reliableq.cancel_job")
    running = job_in(JobStatus.RUNNING)

    answers = [operator.request("POST", f"/v1/jobs/{running.id}/cancel").status_code for _ in range(3)]

    assert answers == [202, 202, 202]
    assert LogEntry.objects.filter(object_id=str(running.id)).count() == 1


def test_resuming_a_queue_leaves_no_row_behind_and_the_pause_answer_shows_no_counts(client_of):
    pauser = client_of("paul", "reliableq.pause_queue")
    reliableq.enqueue("demo.noop", {}, queue="ghost")

    paused = pauser.request("POST", "/v1/queues/ghost/pause")
    resumed = pauser.request("POST", "/v1/queues/never-used/resume")
    again = pauser.request("POST", "/v1/queues/ghost/resume")

    assert paused.status_code == 200 and paused.json()["paused"] is True
    for answer in (paused, resumed, again):
        assert not {"pending", "running", "oldest_due_age_seconds"} & set(answer.json()), answer.json()
    assert not QueueState.objects.exists()


def test_expired_pauses_are_cleared_by_retention():
    from reliableq import services

    QueueState.objects.create(name="once", paused_at=timezone.now(), paused_until=timezone.now())
    services.retain()
    assert not QueueState.objects.exists()


def test_metrics_are_computed_at_most_once_per_interval_and_readers_are_throttled(
    client_of, db_url: str, tmp_path: Path
):
    site = start_site(
        tmp_path,
        db_url,
        workers=1,
        RELIABLEQ_STATS_CACHE_SECONDS="600",
        TESTPROJECT_THROTTLE_RATES='{"reliableq_read": "4/d"}',
    )
    try:
        reader = client_of("prom", "reliableq.view_job")
        reader.site = site
        first = reader.request("GET", "/v1/metrics")
        reliableq.enqueue_many("demo.noop", [{}] * 7)
        second = reader.request("GET", "/v1/metrics")
        reads = [reader.request("GET", path).status_code for path in ("/v1/stats", "/v1/queues", "/v1/metrics")]
    finally:
        processes.stop(site.process)
    assert first.status_code == 200 and second.text == first.text  # the 7 new jobs wait for the next interval
    assert reads == [200, 200, 429]


def test_a_charge_request_without_a_key_writes_nothing_and_charges_are_throttled(
    client_of, db_url: str, tmp_path: Path
):
    site = start_site(tmp_path, db_url, workers=1, TESTPROJECT_THROTTLE_RATES='{"charges": "2/d"}')
    try:
        service = client_of("charge-service", *accounts.CHARGE_SERVICE_PERMISSIONS)
        service.site = site
        body = {"amount": 100, "currency": "EUR"}
        no_key = service.request("POST", "/v1/charges", json=body)
        keyed = service.request("POST", "/v1/charges", json=body, headers={"Idempotency-Key": "k1"})
        flood = service.request("POST", "/v1/charges", json=body, headers={"Idempotency-Key": "k2"})
    finally:
        processes.stop(site.process)
    problem(no_key, 400)
    assert keyed.status_code == 201
    problem(flood, 429)
    assert list(ChargeRequest.objects.values_list("idempotency_key", flat=True)) == ["k1"]


def test_the_demos_submitter_cannot_charge_and_its_charge_service_cannot_submit(site):
    submitter = accounts.token_for("demo", *accounts.SUBMITTER_PERMISSIONS)
    service = accounts.token_for("charge-service", *accounts.CHARGE_SERVICE_PERMISSIONS)

    def post(token: str, path: str, body: dict, **headers: str) -> int:
        return requests.post(
            site.url + path, json=body, headers={"Authorization": f"Token {token}", **headers}, timeout=30
        ).status_code

    assert post(submitter, "/v1/charges", {"amount": 1, "currency": "EUR"}, **{"Idempotency-Key": "x"}) == 403
    assert post(service, "/v1/jobs", NOOP) == 403
    assert post(submitter, "/v1/jobs", NOOP) == 202
    assert not set(accounts.SUBMITTER_PERMISSIONS) & set(accounts.CHARGE_SERVICE_PERMISSIONS)


def test_the_secret_key_file_is_never_readable_by_others(tmp_path, monkeypatch):
    from testproject.secret import secret_key

    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    old = os.umask(0)  # the widest umask: the mode comes from open() itself, not from a chmod after the write
    try:
        secret_key(tmp_path / "secret_key", debug=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600


def test_the_demos_logs_are_readable_by_their_owner_only(tmp_path):
    left = tmp_path / "worker-A.log"
    left.write_text("lease token from an earlier run")
    left.chmod(0o644)

    with processes.private_log(left) as log:
        log.write(b"lease=...")
    with processes.private_log(tmp_path / "new.log"):
        pass

    assert stat.S_IMODE(left.stat().st_mode) == 0o600 and left.read_bytes() == b"lease=..."
    assert stat.S_IMODE((tmp_path / "new.log").stat().st_mode) == 0o600


def test_the_bench_views_need_their_key_and_submit_only_http_kinds(client_of, db_url: str, tmp_path: Path):
    inherited = start_site(tmp_path, db_url, workers=1, TESTPROJECT_BENCH_VIEWS="1")
    try:
        short = requests.post(inherited.url + "/bench/insert", json=NOOP, timeout=30)
    finally:
        processes.stop(inherited.process)
    key = "k" * 40
    site = start_site(tmp_path, db_url, workers=1, TESTPROJECT_BENCH_VIEWS=key)
    try:
        no_header = requests.post(site.url + "/bench/insert", json=NOOP, timeout=30)
        wrong = requests.post(site.url + "/bench/insert", json=NOOP, headers={"X-Bench-Key": "k" * 39}, timeout=30)
        not_http = requests.post(
            site.url + "/bench/drf-insert",
            json={"kind": "test.permanent", "payload": {}},
            headers={"X-Bench-Key": key},
            timeout=30,
        )
        opened = requests.post(site.url + "/bench/insert", json=NOOP, headers={"X-Bench-Key": key}, timeout=30)
    finally:
        processes.stop(site.process)
    assert short.status_code == 404 and no_header.status_code == 404 and wrong.status_code == 404
    assert not_http.status_code == 400
    assert opened.status_code == 202
    assert list(Job.objects.values_list("kind", flat=True)) == ["demo.noop"]
