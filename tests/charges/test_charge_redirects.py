"""The charge job's token goes to the configured charge service only, and only its answer counts.

A security review found that a 302 from the configured service made urllib follow the redirect:
the request, `Authorization: Token <secret>` included, went to the address in `Location`, and
whatever answered there with a 200 marked the job SUCCEEDED with no charge made. These tests
replay that with real HTTP servers on 127.0.0.1: server A (the configured "service") answers a
redirect to server B, which records every request it receives.
"""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import override_settings

import reliableq
from charges.models import Charge, ChargeRequest
from reliableq import queue as jobqueue
from reliableq import registry
from reliableq.models import Job, JobStatus, Outcome
from reliableq.queue import ClaimedJob
from reliableq.services import replay

from .helpers import counts, effect_key, outcomes

SECRET = "s3cr3t-token-for-the-charge-service-only"
EUR_500 = {"amount": 500, "currency": "EUR"}
REDIRECTS = [301, 302, 303, 307, 308]


# -- real HTTP servers -------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Server:
    """An HTTP server on 127.0.0.1 in a thread: records every request, then answers with `answer`."""

    answer: Callable[[Seen], Answer]
    requests: list[Seen] = field(default_factory=list)
    url: str = ""

    def tokens(self) -> list[str]:
        return [r.headers.get("Authorization", "") for r in self.requests]


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[Seen], Answer]], Server]]:
    started: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start(answer: Callable[[Seen], Answer]) -> Server:
        server = Server(answer)
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
                with lock:  # recorded before the answer goes out: the client cannot outrun it
                    server.requests.append(seen)
                status, headers, body = server.answer(seen)
                self.send_response(status)
                for name, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

            def log_message(self, format: str, *args: object) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((httpd, thread))
        server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        return server

    yield start
    for httpd, thread in started:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def json_answer(status: int, data: object) -> Answer:
    return status, {"Content-Type": "application/json"}, json.dumps(data).encode()


@pytest.fixture
def thief(serve) -> Server:
    """Server B: wherever a redirect points. It answers like a charge service would."""
    return serve(lambda seen: json_answer(200, {"idempotency_key": seen.headers.get("Idempotency-Key", "")}))


def redirecting(serve, code: int, location: str) -> Server:
    """Server A, the configured "charge service": answers every request with a redirect."""
    return serve(lambda seen: (code, {"Location": location}, b""))


# -- the job, claimed the way a worker claims it ------------------------------------------


def claimed_charge(payload: dict | None = None) -> ClaimedJob:
    queue = f"t-{uuid.uuid4().hex[:12]}"
    job = reliableq.enqueue("charge", payload or EUR_500, queue=queue)
    claimed, _ = jobqueue.claim(worker_id="w-redirect-test", queues=[queue], limit=1, lease_seconds=30)
    assert [c.id for c in claimed] == [job.id]
    return claimed[0]


def run_charge(job: ClaimedJob, *, url: str, token: str = SECRET) -> object:
    """Call the registered `charge` handler, as the worker does, with the service at `url`."""
    with override_settings(CHARGES={"SERVICE_URL": url, "SERVICE_TOKEN": token}):
        return registry.get("charge").func(job)


# -- the attack, reproduced ---------------------------------------------------------------


@pytest.mark.parametrize("code", [301, 302, 303])
def test_the_servers_reproduce_the_leak_a_stock_urllib_opener_sends_the_token_to_the_redirect_target(
    serve, thief, code
):
    """The control: the same request through urllib's default opener lands at B, token and all."""
    service = redirecting(serve, code, f"{thief.url}/steal")
    request = urllib.request.Request(
        f"{service.url}/v1/charges",
        data=b"{}",
        method="POST",
        headers={"Authorization": f"Token {SECRET}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        response.read()
    assert [r.path for r in thief.requests] == ["/steal"]
    assert thief.tokens() == [f"Token {SECRET}"]


@pytest.mark.django_db
@pytest.mark.parametrize("code", REDIRECTS)
def test_a_redirect_from_the_charge_service_is_refused_and_the_token_never_reaches_its_target(serve, thief, code):
    job = claimed_charge()
    target = f"{thief.url}/steal"
    service = redirecting(serve, code, target)

    with pytest.raises(reliableq.PermanentError) as raised:
        run_charge(job, url=service.url)

    message = str(raised.value)
    assert "redirect" in message and "refused" in message
    assert str(code) in message
    assert target in message  # where it pointed, for the operator
    assert thief.requests == []  # B heard nothing: no token, no body
    # A (the configured address) got the one request, with the token and the job's key.
    assert [(r.method, r.path) for r in service.requests] == [("POST", "/v1/charges")]
    assert service.tokens() == [f"Token {SECRET}"]
    assert service.requests[0].headers["Idempotency-Key"] == job.idempotency_key


@pytest.mark.django_db
def test_a_relative_redirect_is_refused_and_the_error_names_the_resolved_address(serve):
    service = serve(lambda seen: (302, {"Location": "/elsewhere?next=1"}, b""))
    with pytest.raises(reliableq.PermanentError, match="redirect") as raised:
        run_charge(claimed_charge(), url=service.url)
    assert f"{service.url}/elsewhere?next=1" in str(raised.value)
    assert [r.path for r in service.requests] == ["/v1/charges"]  # not followed, not even to itself


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("code", "headers"),
    [(300, {"Location": "http://127.0.0.1:9/x"}), (302, {}), (304, {}), (399, {})],
    ids=["300-multiple-choices", "302-without-location", "304", "399"],
)
def test_any_other_3xx_answer_is_a_permanent_failure_that_says_no_redirect_is_followed(serve, code, headers):
    service = serve(lambda seen: (code, headers, b""))
    with pytest.raises(reliableq.PermanentError, match="redirect") as raised:
        run_charge(claimed_charge(), url=service.url)
    assert str(code) in str(raised.value)
    assert len(service.requests) == 1


# -- only this job's answer is success ----------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (lambda seen: json_answer(200, {"id": str(uuid.uuid4()), "amount": 500, "currency": "EUR"}), "idempotency"),
        (lambda seen: json_answer(200, {"idempotency_key": f"reliableq:charge:{uuid.uuid4()}"}), "idempotency"),
        (lambda seen: json_answer(201, {"idempotency_key": f"reliableq:charge:{uuid.uuid4()}"}), "idempotency"),
        (lambda seen: json_answer(200, {"idempotency_key": None}), "idempotency"),
        (lambda seen: json_answer(200, [seen.headers["Idempotency-Key"]]), "idempotency"),
        (
            lambda seen: json_answer(200, {"charge": {"idempotency_key": seen.headers["Idempotency-Key"]}}),
            "idempotency",
        ),
        (lambda seen: (200, {"Content-Type": "text/html"}, b"<html>Welcome to nginx!</html>"), "JSON"),
        (lambda seen: (200, {}, b""), "JSON"),
        (lambda seen: json_answer(202, {"idempotency_key": seen.headers["Idempotency-Key"]}), "202"),
        (lambda seen: (204, {}, b""), "204"),
    ],
    ids=[
        "no-key",
        "another-jobs-key-200",
        "another-jobs-key-201",
        "null-key",
        "json-list",
        "nested-key",
        "html-page",
        "empty-body",
        "202-accepted",
        "204-no-content",
    ],
)
def test_a_2xx_answer_that_does_not_carry_this_jobs_idempotency_key_is_a_permanent_failure(serve, answer, says):
    service = serve(answer)
    with pytest.raises(reliableq.PermanentError) as raised:
        run_charge(claimed_charge(), url=service.url)
    message = str(raised.value)
    assert says in message
    assert "SERVICE_URL" in message  # what the operator should check before a replay
    assert len(service.requests) == 1


@pytest.mark.django_db
@pytest.mark.parametrize("status", [200, 201])
def test_a_200_or_201_json_answer_carrying_this_jobs_idempotency_key_is_success(serve, status):
    service = serve(
        lambda seen: json_answer(
            status,
            {
                "id": str(uuid.uuid4()),
                "amount": 500,
                "currency": "EUR",
                "idempotency_key": seen.headers["Idempotency-Key"],
            },
        )
    )
    job = claimed_charge()
    run_charge(job, url=service.url)  # returns: success
    assert [r.headers["Idempotency-Key"] for r in service.requests] == [job.idempotency_key]
    assert json.loads(service.requests[0].body) == EUR_500


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["file:///tmp", "ftp://127.0.0.1/", "127.0.0.1:8000", "http://"], ids=["file", "ftp", "no-scheme", "no-host"]
)
def test_a_service_url_that_is_not_http_or_https_is_refused_before_any_request(url):
    """urllib would open file: (and ftp:, data:) URLs: the token and body must only ever go over HTTP(S)."""
    with pytest.raises(reliableq.PermanentError, match=r"CHARGES\['SERVICE_URL'\] must be an http"):
        run_charge(claimed_charge(), url=url)


# -- against the real charge service (gunicorn) and a real worker --------------------------


@pytest.mark.slow
def test_the_real_charge_service_answer_passes_and_a_second_attempt_gets_the_same_charge(charge_service):
    job = claimed_charge()
    run_charge(job, url=charge_service.url, token=charge_service.token)  # 201
    run_charge(job, url=charge_service.url, token=charge_service.token)  # 200, the original charge
    charge = Charge.objects.get(idempotency_key=job.idempotency_key)
    assert (charge.amount, charge.currency) == (500, "EUR")
    assert ChargeRequest.objects.filter(idempotency_key=job.idempotency_key).count() == 2


@pytest.mark.slow
def test_a_worker_buries_a_redirected_charge_in_dead_and_a_replay_after_fixing_the_url_charges_once(
    charge_service, spawn_worker, serve, thief
):
    job = reliableq.enqueue("charge", EUR_500)
    target = f"{thief.url}/steal"
    service = redirecting(serve, 302, target)

    misconfigured = spawn_worker("--burst", env=charge_service.worker_env(CHARGES_SERVICE_URL=service.url))
    assert misconfigured.wait(timeout=30) == 0, misconfigured.output()

    job.refresh_from_db()
    assert job.status == JobStatus.DEAD
    assert outcomes(job) == [Outcome.FAILED_PERMANENT]  # one attempt: a bad URL does not fix itself
    assert "redirect" in job.last_error and target in job.last_error
    assert thief.requests == []
    assert service.tokens() == [f"Token {charge_service.token}"]
    assert not Charge.objects.exists()

    replayed = replay(job.id)
    assert (replayed.status, replayed.effect_key) == (JobStatus.PENDING, effect_key(job))
    fixed = spawn_worker("--burst", env=charge_service.worker_env())
    assert fixed.wait(timeout=30) == 0, fixed.output()

    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert outcomes(job) == [Outcome.FAILED_PERMANENT, Outcome.SUCCEEDED]
    assert counts(job) == {"A": 2, "H": 1, "C": 1, "F": 1}
    assert thief.requests == []
