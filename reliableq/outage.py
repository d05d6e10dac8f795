"""Is the database away for now: down, restarting, failing over, or a read-only standby?

Such an error means "not yet", never a crash: the caller drops its connection and tries again
later on a new one, which libpq opens on whichever listed host answers read-write (a HOST/PORT
list with target_session_attrs=read-write, or a DNS name that moved to the new primary). Any
other database error (a deadlock, a constraint, a statement's own bug) is no outage, and each
caller handles it as it always has.
"""

from __future__ import annotations

from typing import Any

from django.db import connections

# Whatever the statement, this server cannot take it now.
UNAVAILABLE_CLASSES = (
    "08",  # connection exception
    "53",  # insufficient resources: too many connections, a full disk
)
UNAVAILABLE_CODES = frozenset(
    {
        "25006",  # read_only_sql_transaction: a standby (or a primary made read-only)
        "57P01",  # admin_shutdown: pg_ctl stop, pg_terminate_backend
        "57P02",  # crash_shutdown: another backend crashed, the server restarts
        "57P03",  # cannot_connect_now: starting up, shutting down, in recovery
        "57P05",  # idle_session_timeout: the session is over
    }
)
SUMMARY_CHARS = 400


def _chain(exc: BaseException) -> list[BaseException]:
    """The error and those it wraps (Django wraps the driver's error as its __cause__)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 5:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE the server sent with this error, if it sent one (psycopg 3 or psycopg2)."""
    for err in _chain(exc):
        code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        if isinstance(code, str) and code:
            return code
    return None


def unavailable(exc: BaseException) -> bool:
    """True when `exc` says the database cannot serve anyone now, rather than refusing this statement."""
    names = {cls.__name__ for err in _chain(exc) for cls in type(err).__mro__}
    if "InterfaceError" in names:  # the connection is closed or broken
        return True
    code = sqlstate(exc)
    if code is not None:
        return code[:2] in UNAVAILABLE_CLASSES or code in UNAVAILABLE_CODES
    # No SQLSTATE: the driver lost the server (refused, reset, "session is read-only" from
    # target_session_attrs, a timeout), never a statement's error.
    return "OperationalError" in names


def read_only(exc: BaseException) -> bool:
    """The server is read-only: a standby, or the old primary come back as one."""
    return sqlstate(exc) == "25006"


def summary(exc: BaseException) -> str:
    """The error on one bounded line (libpq explains a failed multi-host connect over several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 3] + "..."


def on_standby(connection: Any) -> bool:
    """Whether this open Django connection reached a server in hot standby (PostgreSQL 14 and later
    report it with every connection and update it on promotion: no round trip)."""
    raw = getattr(connection, "connection", None)
    if raw is None:
        return False
    info = getattr(raw, "info", None)
    if info is not None:  # psycopg 3
        return bool(info.parameter_status("in_hot_standby") == "on")
    get = getattr(raw, "get_parameter_status", None)  # psycopg2
    return bool(get is not None and get("in_hot_standby") == "on")


def drop_failed_connections() -> None:
    """Close this thread's connections that raised an error, so that the next use connects again:
    a connection to a read-only server still answers Django's health check (SELECT 1), and would
    otherwise be kept for CONN_MAX_AGE, every write on it refused."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and connection.errors_occurred:
            connection.close()
