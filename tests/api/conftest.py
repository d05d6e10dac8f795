"""Fixtures for the HTTP API tests: users with and without permissions, tokens, clients, a live server."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from testproject import accounts, processes
from tests.support import queue_database_env

VIEW, REPLAY, CANCEL, SUBMIT = "view_job", "replay_job", "cancel_job", "submit_job"
PAUSE = "pause_queue"
ADD_CHARGE, VIEW_CHARGE = "charges.add_charge", "charges.view_charge"
ALL_PERMS = (VIEW, REPLAY, CANCEL, SUBMIT, PAUSE, ADD_CHARGE, VIEW_CHARGE)


@pytest.fixture(autouse=True)
def any_queue_over_http(settings: Any) -> None:
    """The API's tests submit to queues of their own; the default HTTP_QUEUES (["default"]) and its
    refusals are tested in tests/security/test_submitter_bounds.py."""
    settings.RELIABLEQ = {**settings.RELIABLEQ, "HTTP_QUEUES": ["*"]}


def make_user(username: str, *perms: str, password: str | None = None) -> User:
    """A user with these permissions (a bare codename is reliableq's).

    No password unless asked: hashing one costs ~0.3 s.
    """
    user = User.objects.create_user(username, password=password)
    accounts.grant(user, *(perm if "." in perm else f"reliableq.{perm}" for perm in perms))
    assert user.user_permissions.count() == len(perms)
    return user


def token_client(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.fixture
def make_client(db: None) -> Callable[..., APIClient]:
    """make_client("view_job", ...): a token-authenticated client of a new user with those permissions."""
    counter = iter(range(1, 10_000))

    def make(*codenames: str) -> APIClient:
        return token_client(make_user(f"user{next(counter)}", *codenames))

    return make


@pytest.fixture
def operator(db: None) -> User:
    """A user holding every reliableq permission the API checks."""
    return make_user("operator", *ALL_PERMS)


@pytest.fixture
def api(operator: User) -> APIClient:
    """A token-authenticated client of `operator`."""
    return token_client(operator)


@pytest.fixture
def anon() -> APIClient:
    return APIClient()


@dataclass
class LiveAPI:
    """gunicorn serving testproject against the test database, with an operator's token."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def live_api(db_url: str, tmp_path: Path) -> Iterator[LiveAPI]:
    """A real gunicorn (2 workers x 8 threads) on a free port; stopped when the test ends.

    db_url makes the test transactional: the server sees only committed rows, so the operator
    and its token are committed before it starts.
    """
    token = Token.objects.create(user=make_user("live-operator", *ALL_PERMS)).key
    port = processes.free_port()
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as log_file:
        # The server's own settings: only DATABASE_URL points it at the test database.
        env = processes.child_env(
            DATABASE_URL=db_url, DJANGO_DEBUG="0", RELIABLEQ_HTTP_QUEUES='["*"]', **queue_database_env()
        )
        proc = processes.start_api(port, env=env, log=log_file)
    url = f"http://127.0.0.1:{port}"
    try:
        processes.wait_http(url + "/v1/schema", timeout=30, process=proc)
        yield LiveAPI(url=url, token=token, process=proc, log=log)
    finally:
        processes.stop(proc)


def problem_of(response: Any, status: int) -> dict[str, Any]:
    """Assert `response` is a problem+json document with this status; return its body."""
    assert response.status_code == status, (response.status_code, getattr(response, "content", b"")[:2000])
    assert response["Content-Type"].startswith("application/problem+json"), response["Content-Type"]
    body = response.json()
    for key in ("type", "title", "status", "detail"):
        assert key in body, body
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    return body
