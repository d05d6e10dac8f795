"""The queue's database: its alias (RELIABLEQ["DATABASE"]), that alias's connection and transactions.

Every statement and transaction of the package goes through here, and the models' manager reads
the same alias (reliableq.models.QueueManager), so the queue can live on a database of its own.
The alias is read on each call, so override_settings takes effect at once.
"""

from __future__ import annotations

import contextvars
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, cast

from django.db import InterfaceError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..conf import queue_alias

# What this module relies on beyond Django's documented API, in one place: the attributes of the
# PostgreSQL backend's connection wrapper and cursor that cursor(), run() and fetch() use, as
# BaseDatabaseWrapper.cursor() and CursorWrapper.execute() use them. tests/unit/test_db_internals.py
# pins each on the installed Django (CI runs it on every supported version).
DJANGO_INTERNALS = {
    "django.db.backends.postgresql.base.DatabaseWrapper": (
        "close_if_health_check_failed", "ensure_connection", "wrap_database_errors", "validate_thread_sharing",
        "make_cursor", "make_debug_cursor", "queries_logged", "execute_wrappers", "in_atomic_block",
        "validate_no_broken_transaction", "connection",
    ),
    "django.db.backends.utils.CursorWrapper": ("cursor", "db"),
    "django.db.backends.postgresql.base.ServerBindingCursor": (),  # psycopg 3 only: its absence is handled
}  # fmt: skip
P = ParamSpec("P")
R = TypeVar("R")
DEADLOCK_DETECTED = "40P01"


def alias() -> str:
    """The alias of the database that holds the queue's tables."""
    return queue_alias()


def connection() -> BaseDatabaseWrapper:
    """The calling thread's connection to the queue's database."""
    return connections[alias()]


def cursor() -> CursorWrapper:
    """A cursor on the queue's database, in its current transaction (or in autocommit), binding its
    parameters on the server: Django's default cursor quotes each one into the statement's text in
    Python, which for the hot statements' arrays of ids and tokens cost more than running them."""
    conn = connection()
    binding = _server_binding() if conn.vendor == "postgresql" else None
    if binding is None:
        return conn.cursor()
    # What BaseDatabaseWrapper.cursor() does, with the other cursor class.
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    with conn.wrap_database_errors:
        raw = binding(conn.connection)
        conn.validate_thread_sharing()
        return conn.make_debug_cursor(raw) if conn.queries_logged else conn.make_cursor(raw)


def run(cursor: CursorWrapper, sql: str, params: Sequence[Any]) -> None:
    """Execute a statement of the worker's hot path on `cursor` (one of cursor()), prepared once per
    connection where that is safe: PostgreSQL then neither parses nor plans it again at each call.

    Not through a pooler in transaction mode: the next transaction may reach a server connection
    that never saw the statement, or one where another client's statement has its name. A tool
    watching the connection's statements (an execute wrapper, DEBUG's query log) sees them as usual.
    """
    conn = cursor.db
    if conn.execute_wrappers or conn.queries_logged:
        token = preparing.set(True)
        try:
            cursor.execute(sql, params)
        finally:
            preparing.reset(token)
        return
    conn.validate_no_broken_transaction()
    with conn.wrap_database_errors:
        raw = cursor.cursor
        if _may_prepare(raw.connection):
            raw.execute(sql, params, prepare=True)
        else:
            raw.execute(sql, params)


def fetch(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """run() a statement of the worker's hot path on a cursor of its own and return its rows.

    On a connection that prepares and with nothing watching its statements, the statement goes
    through a cursor kept for the connection: Django's cursor wrapper, made, checked and closed
    around every statement, cost as much as a no-op job's own run. Errors are Django's, and a
    transaction Django knows is broken refuses the statement, as on the usual path; everything
    else takes the usual path.
    """
    conn = connection()
    raw = conn.connection
    if raw is not None and not conn.execute_wrappers and not conn.queries_logged:
        kept = _kept.get(conn)
        if kept is not None and kept.connection is raw:
            conn.validate_no_broken_transaction()
            with conn.wrap_database_errors:
                kept.execute(sql, params, prepare=True)
                return cast(list[tuple[Any, ...]], kept.fetchall())
    with cursor() as usual:
        run(usual, sql, params)
        rows = cast(list[tuple[Any, ...]], usual.fetchall())
    raw = conn.connection
    kept = _kept.get(conn)
    if raw is not None and _direct.get(raw) and (kept is None or kept.connection is not raw):
        binding = _server_binding()
        if binding is not None:
            # Keyed by Django's wrapper, not by the psycopg connection: the cursor refers to its
            # connection (which would keep the key alive), and a reconnect replaces both.
            _kept[conn] = binding(raw)
    return rows


# Django's connection wrapper (one per thread and alias) -> the cursor fetch() keeps for it.
_kept: weakref.WeakKeyDictionary[BaseDatabaseWrapper, Any] = weakref.WeakKeyDictionary()
# True while run() hands a statement it would prepare to the execute wrappers (the plan tests read it).
preparing: contextvars.ContextVar[bool] = contextvars.ContextVar("reliableq_preparing", default=False)
# psycopg connection -> whether it reaches PostgreSQL directly (decided once per connection).
_direct: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
PREPARE_THRESHOLD = 2**31 - 1  # explicit prepare=True only: no other statement of the connection is prepared


_BACKEND_PID_SQL = "SELECT pg_backend_pid()"


def _may_prepare(raw: Any) -> bool:
    known = _direct.get(raw)
    if known is not None:
        return known
    info = getattr(raw, "info", None)
    if info is None or not hasattr(raw, "prepare_threshold"):  # not psycopg 3
        _direct[raw] = False
        return False
    # A pooler answers the startup with a cancel key of its own, so the process id it gives differs
    # from the server process's: PgBouncer, Odyssey and the hosted proxies all relay cancels this way.
    with raw.cursor() as probe:
        probe.execute(_BACKEND_PID_SQL)
        row = probe.fetchone()
    direct = row is not None and row[0] == info.backend_pid
    if direct and raw.prepare_threshold is None:  # Django's default: psycopg prepares nothing
        raw.prepare_threshold = PREPARE_THRESHOLD
    _direct[raw] = direct
    return direct


_COMPILES_SQL = "SELECT pg_jit_available() AND current_setting('jit')::bool"
_NO_JIT_SQL = "SET LOCAL jit = off"
# psycopg connection -> whether its server compiles plans with JIT (asked once per connection, as _direct).
_compiles: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def without_jit() -> None:
    """Plan the rest of this transaction's statements without JIT compilation, where the server
    would compile: for a statement whose cost the planner cannot bound, a workflow's recursive walk.

    Its estimate grows with the edges' statistics (every recursive step is guessed at ten times
    the one before), past jit_above_cost and the inlining and optimization thresholds once a few
    wide fan-outs are analyzed; each statement then compiles for some 250 ms to read a handful of
    rows. SET LOCAL ends with the transaction, so nothing leaks through a transaction pooler. Asked
    once per connection; nothing is sent to a server without JIT (the embedded PostgreSQL has no
    LLVM) or outside a transaction, where SET LOCAL would do nothing."""
    conn = connection()
    if not conn.in_atomic_block:
        return
    conn.ensure_connection()
    raw = conn.connection
    compiles = _compiles.get(raw)
    if compiles is None:
        with cursor() as probe:
            probe.execute(_COMPILES_SQL)
            compiles = _compiles[raw] = bool(probe.fetchone()[0])
    if compiles:
        with cursor() as off:
            off.execute(_NO_JIT_SQL)


@functools.cache
def _server_binding() -> Any:
    """Django's psycopg 3 cursor that binds on the server (None with psycopg 2)."""
    try:
        from django.db.backends.postgresql.base import ServerBindingCursor
    except ImportError:
        return None
    return ServerBindingCursor


def atomic(*, durable: bool = False) -> transaction.Atomic:
    """A transaction on the queue's database (a savepoint inside one already open there)."""
    return transaction.atomic(using=alias(), durable=durable)


DEADLOCK_RETRIES = 3


def retry_deadlocks(func: Callable[P, R]) -> Callable[P, R]:
    """Run an operator's change (a cancel, a replay) again when PostgreSQL aborted it to break a
    deadlock with a worker's finish.

    Their locks cannot always follow the finish's order: a finish locks its jobs, then the counts,
    then a member it releases, while an operator's cancel of that member locks it, then the counts.
    PostgreSQL aborts one of the two; the finish is written again by its worker, and the operator's
    change is retried here. Only as the outermost transaction: inside a caller's, the caller's
    transaction is broken and the error goes up."""

    @functools.wraps(func)
    def retrying(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(DEADLOCK_RETRIES + 1):
            if attempt == DEADLOCK_RETRIES or connection().in_atomic_block:
                return func(*args, **kwargs)
            try:
                return func(*args, **kwargs)
            except OperationalError as exc:
                if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK_DETECTED:
                    raise
        raise AssertionError("unreachable")

    return retrying


def again_if_dropped(func: Callable[P, R]) -> Callable[P, R]:
    """Run a statement that is safe to send twice once more, on a new connection, when the server had
    dropped this thread's connection (a restart, a terminated backend) and the statement met that.

    Without it, a step whose function ran would lose its record to a connection broken while the
    handler was busy, and the function would run again in the next attempt. Only outside a
    transaction: inside one, the transaction is lost with its connection and the error goes up."""

    @functools.wraps(func)
    def again(*args: P.args, **kwargs: P.kwargs) -> R:
        conn = connection()
        if conn.in_atomic_block:
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError):
            if conn.connection is None or conn.is_usable():
                raise
            conn.close()
        return func(*args, **kwargs)

    return again
