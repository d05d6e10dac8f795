"""Fixtures for the charge service tests: a live gunicorn charge service on the test database."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.authtoken.models import Token

from testproject import accounts, dburl, processes
from tests.support import worker_env


@dataclass
class ChargeService:
    """The live charge service (gunicorn) and what a worker needs to call it."""

    url: str
    token: str
    log: Path  # gunicorn's output, for a failing test

    def worker_env(self, **overrides: Any) -> dict[str, str]:
        """Env overrides for spawn_worker: this service, its token, and a short lease."""
        env = {
            "CHARGES_SERVICE_URL": self.url,
            "CHARGES_SERVICE_TOKEN": self.token,
            "RELIABLEQ_LEASE_SECONDS": "1",
        }
        env.update({k: str(v) for k, v in overrides.items()})
        return env


@pytest.fixture
def api_user(db: None) -> User:
    # No password (no slow hashing); what the charge job's service account holds.
    return accounts.grant(User.objects.create_user("charges-tester"), *accounts.CLIENT_PERMISSIONS)


@pytest.fixture
def api_token(api_user: User) -> str:
    return Token.objects.create(user=api_user).key


@pytest.fixture(scope="session")
def _charge_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """One gunicorn for the session, on the test database, with the fault knob live.

    Started once: it keeps no state of its own (no persistent connections, the knob and the
    tokens are read from the database per request), so the per-test flush resets it.
    """
    db_url = dburl.build(connection.settings_dict)
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("charge-service") / "gunicorn.log"
    log = log_path.open("wb")
    server = processes.start_api(port, env=worker_env(db_url, RELIABLEQ_FAULT_INJECTION="1"), log=log)
    try:
        processes.wait_http(f"{url}/v1/schema", process=server)
        yield url, log_path, server
    finally:
        # SIGQUIT is gunicorn's quick shutdown: the tests are over, nothing is left to drain.
        if server.poll() is None:
            server.send_signal(signal.SIGQUIT)
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                processes.stop(server)
        log.close()


@pytest.fixture
def charge_service(
    _charge_server: tuple[str, Path, subprocess.Popen[bytes]], db_url: str, api_token: str
) -> ChargeService:
    """The live charge service (gunicorn) on the test database, and a token that it accepts.

    The knob (charges.faults.set_knob) is honoured because FAULT_INJECTION is on in the
    server; no knob row means no fault, so it is inert until a test sets it.
    """
    url, log, server = _charge_server
    assert server.poll() is None, f"the charge service exited with {server.returncode}:\n{log.read_text()[-3000:]}"
    return ChargeService(url=url, token=api_token, log=log)
