"""The API's token lookup and permission query: the statements on the auth tables.

Not the queue's tables: Django's user, group and permission tables and rest_framework.authtoken's
Token, on the database the router names for them (the default one, usually). Their statements
live here so that every statement of the package is in this layer; the rules (what a token
means, which permissions count, DRF's answers) stay in reliableq.api.

The permission test is written as nested scalar subqueries over primary keys and the user's
foreign-key indexes, not as one join: it runs on every API request without a prepared plan (a
pooler in transaction mode could not keep one), and PostgreSQL plans each small subquery with no
join search. As a five-table join with a UNION it took about 170 us to plan and 100 us to run;
this, about 115 and 40 (EXPLAIN ANALYZE on PostgreSQL 15, a warm connection). Where it can, the
token lookup runs it inside a PL/pgSQL function whose plan the server keeps
(reliableq.api.tokenfunction, migration 0010).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections, router

FUNCTION = "reliableq_token_user"
SIGNATURE = f"{FUNCTION}(text, text[])"
FUNCTION_CODENAMES = "= ANY(codenames)"  # the function's test of a codename: its parameter


def codenames_in(codenames: Sequence[str]) -> str:
    """SQL: a codename's test against these names, written as literals (a list parameter costs
    more to adapt than the statement to run). The names are the package's own, never a caller's."""
    return "IN (" + ", ".join(f"'{codename}'" for codename in codenames) + ")"


def held_sql(user_id: str, codenames: str, user_model: Any) -> str:
    """SQL: a text[] of the "app_label.codename" permissions the user `user_id` holds directly or
    through a group, of those whose codename passes `codenames` (codenames_in(), or the function's
    FUNCTION_CODENAMES). Names come from the permission rows themselves, never from ids remembered
    between requests, which a flush or a re-migration would give to other permissions."""
    return _held_sql(user_model, user_id, codenames)


@functools.lru_cache(maxsize=8)
def _held_sql(user_model: Any, user_id: str, codenames: str) -> str:
    user_perms = user_model._meta.get_field("user_permissions").remote_field.through._meta
    user_groups = user_model._meta.get_field("groups").remote_field.through._meta
    group_perms = Group._meta.get_field("permissions").remote_field.through._meta  # type: ignore[union-attr]
    name = str(user_model._meta.model_name)
    user_column = user_perms.get_field(name).column
    groups_user_column = user_groups.get_field(name).column
    return (
        f"ARRAY(SELECT (SELECT ct.app_label FROM {ContentType._meta.db_table} ct WHERE ct.id = p.content_type_id)"
        f" || '.' || p.codename FROM {Permission._meta.db_table} p"
        f" WHERE p.codename {codenames} AND p.id = ANY(ARRAY("
        f"SELECT up.permission_id FROM {user_perms.db_table} up WHERE up.{user_column} = {user_id}"
        f" UNION ALL SELECT gp.permission_id FROM {group_perms.db_table} gp WHERE gp.group_id = ANY(ARRAY("
        f"SELECT ug.group_id FROM {user_groups.db_table} ug WHERE ug.{groups_user_column} = {user_id})))))"
    )


def fetch_held_sql(codenames: Sequence[str], user_model: Any) -> str:
    """fetch_held's statement: held_sql's array of the user given as its two parameters."""
    return f"SELECT {held_sql('%s', codenames_in(codenames), user_model)}"


def fetch_held(user_pk: Any, codenames: Sequence[str], user_model: Any) -> list[str]:
    """The permissions (of those named) the user holds directly or through a group: one statement."""
    with connections[router.db_for_read(Permission)].cursor() as cursor:
        cursor.execute(fetch_held_sql(codenames, user_model), [user_pk, user_pk])
        return list(cursor.fetchone()[0])


@functools.lru_cache(maxsize=8)
def lookup_sql(user_model: Any, token_table: str, codenames: tuple[str, ...] | None) -> tuple[str, list[str]]:
    """The SELECT of a token's user (and, with `codenames`, the permissions it holds of those), and
    the user's attribute names in its order. One parameter: the token's key."""
    meta = user_model._meta
    pk = meta.pk.column
    fields = meta.concrete_fields
    columns = ", ".join(f"u.{field.column}" for field in fields)
    held = "NULL" if codenames is None else held_sql(f"u.{pk}", codenames_in(codenames), user_model)
    # The token as a scalar subquery, not a join: PostgreSQL plans it without a join search.
    sql = (
        f"SELECT {columns}, {held} FROM {meta.db_table} u"
        f" WHERE u.{pk} = (SELECT t.user_id FROM {token_table} t WHERE t.key = %s)"
    )
    return sql, [field.attname for field in fields]


def fetch_one(connection: Any, sql: str, key: str) -> Any:
    """The row of a token lookup (lookup_sql's or call_sql's) on `connection`, or None."""
    with connection.cursor() as cursor:
        cursor.execute(sql, [key])
        return cursor.fetchone()


def call_sql(codenames: Sequence[str]) -> str:
    """The call of the token function: its user row's columns, then `held`. One parameter: the key."""
    return f"SELECT (f.token_user).*, f.held FROM {FUNCTION}(%s, '{{{','.join(codenames)}}}'::text[]) f"


def create_function_sql(user_model: Any, token_table: str) -> str:
    """CREATE OR REPLACE the function for this user model: the user's row and its held permissions."""
    meta = user_model._meta
    table = meta.db_table
    held = held_sql(f"u.{meta.pk.column}", FUNCTION_CODENAMES, user_model)
    return (
        f"CREATE OR REPLACE FUNCTION {FUNCTION}(token_key text, codenames text[])"
        f" RETURNS TABLE (token_user {table}, held text[]) LANGUAGE plpgsql STABLE AS $reliableq$\n"
        f"BEGIN\n"
        f"  RETURN QUERY SELECT u::{table}, {held} FROM {table} u\n"
        f"    WHERE u.{meta.pk.column} = (SELECT t.user_id FROM {token_table} t WHERE t.key = token_key);\n"
        f"END\n"
        f"$reliableq$"
    )


def drop_function_sql() -> str:
    return f"DROP FUNCTION IF EXISTS {SIGNATURE}"


_INSTALLED_SQL = "SELECT to_regprocedure(%s) IS NOT NULL"


def function_columns(connection: Any, call: str) -> list[str] | None:
    """The names of the columns `call` (call_sql's) returns on `connection`; None when the function
    is not installed there."""
    with connection.cursor() as cursor:
        cursor.execute(_INSTALLED_SQL, [SIGNATURE])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(call, [""])  # no token is empty: no row, only the columns
        return [column.name for column in cursor.description]
