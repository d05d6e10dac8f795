"""Attack 7: query parameters that were silently ignored, framing, and a site signed with a committed key."""

from __future__ import annotations

import subprocess
import sys

import pytest

import reliableq
from testproject import processes
from testproject.secret import COMMITTED_FALLBACK

from .conftest import problem

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_unknown_query_parameters_on_the_job_list_are_400(client_of):
    reader = client_of("rita", "reliableq.view_job")
    reliableq.enqueue("demo.noop", {"ssn": "123-45-6789"})
    body = problem(reader.request("GET", "/v1/jobs", params={"payload__ssn": "x"}), 400)
    assert body["errors"] == {"payload__ssn": ["Unknown query parameter."]}
    assert reader.request("GET", "/v1/jobs", params={"status": "PENDING"}).status_code == 200


def test_pages_and_answers_refuse_to_be_framed(client_of, site):
    reader = client_of("rita", "reliableq.view_job")
    for answer in (reader.request("GET", "/v1/jobs"), reader.session.get(site.url + "/admin/login/", timeout=30)):
        assert answer.headers.get("X-Frame-Options") == "DENY", answer.headers


def run_check(**env: str) -> subprocess.CompletedProcess[str]:
    child = processes.child_env(**env)
    child.pop("DJANGO_DEBUG", None)
    child.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=processes.ROOT,
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_site_refuses_to_start_with_the_committed_secret_key_when_debug_is_off():
    refused = run_check(DJANGO_SECRET_KEY=COMMITTED_FALLBACK, DJANGO_DEBUG="0")
    assert refused.returncode != 0
    assert "DJANGO_SECRET_KEY is the key that was committed" in refused.stderr
    assert run_check(DJANGO_SECRET_KEY=COMMITTED_FALLBACK, DJANGO_DEBUG="1").returncode == 0
    assert run_check(DJANGO_SECRET_KEY="a-key-of-this-site-only-" + "x" * 40).returncode == 0


def test_without_a_key_the_site_generates_one_and_every_process_shares_it(tmp_path, monkeypatch):
    from testproject.secret import secret_key

    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    path = tmp_path / "secret_key"
    first = secret_key(path, debug=False)
    assert len(first) >= 50 and first != COMMITTED_FALLBACK
    assert secret_key(path, debug=False) == first
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_the_benchmarks_unauthenticated_views_are_not_served_by_default(site):
    """testproject's /bench/insert and /bench/drf-insert make jobs without a login: only a
    benchmark's server has them."""
    import requests

    for route in ("/bench/noop", "/bench/insert", "/bench/drf-insert"):
        answer = requests.post(site.url + route, json={"kind": "demo.noop", "payload": {}}, timeout=30)
        assert answer.status_code == 404, (route, answer.status_code)
