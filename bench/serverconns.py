"""Count client connections on the PostgreSQL server itself (pg_stat_activity) and keep the peaks.

The chaos suite and the benchmarks use it to state what a fleet really holds: the pooler's
server connections (by PgBouncer's own login role, bench.pgbouncer.SERVER_ROLE), a fleet's
direct connections (by application name), the direct LISTEN connections. Counted by PostgreSQL,
not by what a client or the pooler believes it holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

# name -> (a condition on pg_stat_activity's columns, its parameters)
Groups = Mapping[str, tuple[str, tuple[Any, ...]]]


class ServerConnections:
    """Peaks of client backends in each group, sampled at most every `interval` seconds."""

    def __init__(self, url: str, groups: Groups, *, interval: float = 0.2) -> None:
        self.url = url
        self.groups = dict(groups)
        self.interval = interval
        self.peaks = dict.fromkeys(self.groups, 0)
        # The highest count seen in two samples in a row: a backend that PostgreSQL still lists for an
        # instant while it exits (a restart, a terminated connection) is not one the pooler holds.
        self.sustained = dict.fromkeys(self.groups, 0)
        self._last: dict[str, int] | None = None
        self.samples = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._next = 0.0
        columns = sql.SQL(", ").join(
            sql.SQL("count(*) FILTER (WHERE {})").format(sql.SQL(condition)) for condition, _ in self.groups.values()
        )
        self._query = sql.SQL(
            "SELECT {} FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).format(columns)
        self._params = [p for _, params in self.groups.values() for p in params]

    def sample(self) -> None:
        """Take a sample if one is due; a server restarting or a connection cut skips it."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
            row = self._conn.execute(self._query, self._params).fetchone()
        except psycopg.OperationalError:
            self.close()
            self._last = None
            return
        assert row is not None
        self.samples += 1
        counts = dict(zip(self.groups, row, strict=True))
        for name, count in counts.items():
            self.peaks[name] = max(self.peaks[name], count)
            if self._last is not None:
                self.sustained[name] = max(self.sustained[name], min(count, self._last[name]))
        self._last = counts

    @contextmanager
    def sampling(self) -> Iterator[ServerConnections]:
        """Sample on a thread of its own until the block ends."""
        done = threading.Event()

        def run() -> None:
            while not done.is_set():
                self.sample()
                done.wait(self.interval)

        thread = threading.Thread(target=run, name="server-connections", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join(timeout=10)
            self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
