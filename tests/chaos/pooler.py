"""The chaos run behind PgBouncer: what PostgreSQL counts of the pooler's and the listeners' connections.

PgBouncer logs in as a role of its own (bench.pgbouncer.SERVER_ROLE), so the server itself
says how many connections the pooler holds. The workers' LISTEN connections go direct, as the
postgres role, under application names ending in LISTEN_SUFFIX.
"""

from __future__ import annotations

from bench.pgbouncer import SERVER_ROLE
from bench.serverconns import ServerConnections

LISTEN_SUFFIX = "-listen"


def watch(url: str) -> ServerConnections:
    """A sampler of the pooler's server connections ("pooled") and the direct LISTEN connections ("listening")."""
    return ServerConnections(
        url,
        {
            "pooled": ("usename = %s", (SERVER_ROLE,)),
            "listening": (
                "usename <> %s AND application_name LIKE %s AND query LIKE 'LISTEN%%'",
                (SERVER_ROLE, f"%{LISTEN_SUFFIX}"),
            ),
        },
    )
