"""The chaos run behind PgBouncer: the pooler's own server role, and a watch on what it holds.

PgBouncer logs in to PostgreSQL as a role of its own (ROLE), so the server itself can say how
many connections the pooler holds: pg_stat_activity by role, not PgBouncer's word for it. The
workers' LISTEN connections go direct, as the postgres role, under application names ending in
LISTEN_SUFFIX.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

ROLE = "rq_pooler"
LISTEN_SUFFIX = "-listen"
SAMPLE_SECONDS = 0.2


def ensure_role(conn: psycopg.Connection[Any]) -> None:
    """The pooler's login role; a superuser like the postgres role the direct clients use, so nothing else differs."""
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [ROLE]).fetchone():
        conn.execute(f"CREATE ROLE {ROLE} LOGIN SUPERUSER")


class ServerConnectionWatch:
    """Sample, on the server, the pooler's connections and the direct LISTEN connections; keep the peaks."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.peak_pooled = 0
        self.peak_listening = 0
        self.samples = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._next = 0.0

    def sample(self) -> None:
        """Take a sample if one is due; a server restarting or a connection cut skips it."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + SAMPLE_SECONDS
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
            pooled, listening = self._conn.execute(
                "SELECT count(*) FILTER (WHERE usename = %s),"
                "       count(*) FILTER (WHERE usename <> %s AND application_name LIKE %s AND query LIKE 'LISTEN%%')"
                "  FROM pg_stat_activity WHERE backend_type = 'client backend'",
                [ROLE, ROLE, f"%{LISTEN_SUFFIX}"],
            ).fetchone()  # type: ignore[misc]
        except psycopg.OperationalError:
            self.close()
            return
        self.samples += 1
        self.peak_pooled = max(self.peak_pooled, pooled)
        self.peak_listening = max(self.peak_listening, listening)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
