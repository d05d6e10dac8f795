"""A live site for the attacks: gunicorn serving testproject on the test database, users holding
exactly the permissions each attack needs, and HTTP clients that talk to it over a real socket."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from testproject import accounts, processes
from tests.support import queue_database_env

pytestmark = pytest.mark.slow

PASSWORD = "a long operator passphrase"


@dataclass
class Site:
    """The live server: its base URL and the gunicorn process (its log in a file)."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Client:
    """A token-authenticated HTTP client of one user on the live site."""

    site: Site
    user: User
    token: str
    session: requests.Session = field(default_factory=requests.Session)

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Token {self.token}", **kwargs.pop("headers", {})}
        return self.session.request(method, self.site.url + path, headers=headers, timeout=30, **kwargs)

    def submit(self, body: dict[str, Any], key: str | None = None) -> requests.Response:
        return self.request("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key} if key else {})


def start_site(tmp_path: Path, db_url: str, *, workers: int = 2, **env: str) -> Site:
    port = processes.free_port()
    log = tmp_path / f"gunicorn-{port}.log"
    with log.open("wb") as log_file:
        child = processes.child_env(DATABASE_URL=db_url, DJANGO_DEBUG="0", **queue_database_env(), **env)
        proc = processes.start_api(port, env=child, log=log_file, workers=workers)
    site = Site(url=f"http://127.0.0.1:{port}", process=proc, log=log)
    processes.wait_http(site.url + "/v1/schema", timeout=30, process=proc)
    return site


@pytest.fixture
def site(db_url: str, tmp_path: Path) -> Iterator[Site]:
    """gunicorn on a free port, seeing only committed rows (db_url makes the test transactional)."""
    live = start_site(tmp_path, db_url)
    try:
        yield live
    finally:
        processes.stop(live.process)


@pytest.fixture
def client_of(site: Site) -> Callable[..., Client]:
    """client_of("alice", "reliableq.submit_job", ...): a new user with exactly these permissions."""

    def make(username: str, *perms: str, password: str | None = None) -> Client:
        user = accounts.grant(
            User.objects.create_user(username, password=password, is_staff=password is not None), *perms
        )
        return Client(site=site, user=user, token=Token.objects.create(user=user).key)

    return make


def admin_session(site: Site, username: str, password: str = PASSWORD) -> requests.Session:
    """Log in through the admin's own login form, as a browser does (CSRF cookie and field)."""
    session = requests.Session()
    page = session.get(site.url + "/admin/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    answer = session.post(
        site.url + "/admin/login/?next=/admin/",
        timeout=30,
        allow_redirects=False,
        data={
            "csrfmiddlewaretoken": token.group(1),
            "username": username,
            "password": password,
            "next": "/admin/",
        },
        headers={"Referer": site.url + "/admin/login/"},
    )
    assert answer.status_code == 302, (answer.status_code, answer.text[:500])
    return session


def csrf_of(session: requests.Session, site: Site, path: str) -> str:
    page = session.get(site.url + path, timeout=30)
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def problem(response: requests.Response, status: int) -> dict[str, Any]:
    """Assert a problem+json answer with this status; return its body."""
    assert response.status_code == status, (response.status_code, response.text[:1000])
    assert response.headers["Content-Type"].startswith("application/problem+json"), response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body
