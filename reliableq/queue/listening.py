"""The listener's own connections: LISTEN for enqueue's NOTIFY, and the probe that checks it hears.

Not Django's connections: a LISTEN must stay on one server session for as long as the worker
runs, outside any transaction, and Django closes or recycles its connections around requests and
atomic blocks. Each connection takes what Django itself would pass to psycopg.connect for its
alias (its OPTIONS, its adapters), so failover host lists and TLS settings hold here too.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connections

from ..conf import reliableq_settings
from .enqueue import CHANNEL, NOTIFY_QUEUE_SQL


def aliases() -> tuple[str, str]:
    """(the alias NOTIFY travels through, the alias LISTEN uses)."""
    database = str(reliableq_settings.DATABASE)
    return database, str(reliableq_settings.LISTEN_DATABASE or database)


def connect_kwargs(alias: str, application_name: str) -> dict[str, Any]:
    """What Django itself would pass to psycopg.connect for this alias (its OPTIONS, its adapters)."""
    params: dict[str, Any] = connections[alias].get_connection_params()
    params.setdefault("application_name", application_name)
    return params


_LISTEN_SQL = f"LISTEN {CHANNEL}"


def listening(params: dict[str, Any]) -> psycopg.Connection[Any]:
    """A connection of its own (autocommit) that LISTENs on enqueue's channel; the caller closes it."""
    conn = psycopg.connect(**params, autocommit=True)
    try:
        conn.execute(_LISTEN_SQL)
    except BaseException:
        conn.close()
        raise
    return conn


def send_probe(params: dict[str, Any], payload: str) -> None:
    """NOTIFY `payload` on enqueue's channel the way enqueue does, over a connection of its own."""
    with psycopg.connect(**params, autocommit=True) as sender:
        sender.execute(NOTIFY_QUEUE_SQL, [CHANNEL, payload])
