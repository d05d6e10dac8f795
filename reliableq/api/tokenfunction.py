"""The token lookup as a PL/pgSQL function, so that PostgreSQL keeps its plan between requests.

Every API request looks up its token, its user and the permissions the API checks
(reliableq.api.authentication). Sent as a statement, that lookup is planned on every request:
on a 2-core VM about 0.3 ms of planning for 0.1-0.2 ms of running, more than the job's INSERT.
A prepared statement would keep the plan, but it lives in one server session, which a pooler in
transaction mode (PgBouncer 1.18) hands to other clients between transactions. A PL/pgSQL
function's plans are kept by whichever server session runs it, for any client: the statement
that calls it is planned in microseconds, and the lookup inside runs its kept plan (the plan is
dropped and made again when a table it reads changes, as for any cached plan).

Migration 0010 creates the function in the database that holds the user table, when that is the
queue's database and rest_framework.authtoken is installed; `positions()` tells, once per
process and database, whether the function is there and returns the row the user model expects.
Where it is not (the queue on a database of its own, authtoken installed after the migration, a
user model whose table changed), authentication sends the plain statement, as before: the same
rows, the same answers.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import DatabaseError

from ..queue import tokens
from . import permissions

NAME = tokens.FUNCTION
SIGNATURE = tokens.SIGNATURE
# The codenames of permissions.CHECKED, passed on each call: a new permission needs no new function.
CALL = tokens.call_sql(permissions.CODENAME_LIST)

# (alias, database name, user model) -> where each concrete field of the user model sits in the
# function's row, or None when the function cannot serve that user model there.
_POSITIONS: dict[tuple[str, str, Any], list[int] | None] = {}
_LOCK = threading.Lock()


def create_sql(user_model: Any, token_table: str) -> str:
    """CREATE OR REPLACE the function for this user model: the user's row and its held permissions."""
    return tokens.create_function_sql(user_model, token_table)


def drop_sql() -> str:
    return tokens.drop_function_sql()


def positions(connection: Any, user_model: Any) -> list[int] | None:
    """Where each of the user model's concrete fields sits in the function's row; None when the
    function is missing or does not return the user model's columns (then send the plain statement).

    Asked once per process and database. A failure (a connection that died since its last
    request) answers None for this request and asks again next time.
    """
    key = _key(connection, user_model)
    try:
        return _POSITIONS[key]
    except KeyError:
        pass
    try:
        found = _ask(connection, user_model)
    except DatabaseError:
        return None
    with _LOCK:
        _POSITIONS[key] = found
    return found


def _key(connection: Any, user_model: Any) -> tuple[str, str, Any]:
    return connection.alias, str(connection.settings_dict.get("NAME")), user_model


def forget() -> None:
    """Ask again on the next request (after the function was created or dropped)."""
    with _LOCK:
        _POSITIONS.clear()


def _ask(connection: Any, user_model: Any) -> list[int] | None:
    if connection.vendor != "postgresql":
        return None
    names = tokens.function_columns(connection, CALL)
    if names is None or names[-1:] != ["held"]:
        return None
    index = {name: i for i, name in enumerate(names[:-1])}
    columns = [field.column for field in user_model._meta.concrete_fields]
    if len(index) != len(names) - 1 or any(column not in index for column in columns):
        return None
    return [index[column] for column in columns]
