"""DRF token authentication in one statement: the user, and the permissions the API checks.

DRF's TokenAuthentication reads the token with its user through the ORM; on the submission path
that, and the permission queries after it, cost more than the job's INSERT. This reads the same
rows (rest_framework.authtoken's Token, the user model) with one raw statement (each column
through its field's converters, as the ORM would), fetches the
user's permissions in it when Django's ModelBackend is the only backend, and answers exactly
as DRF does: 401 for an unknown token or an inactive user.

The statement's text and the columns' converters are worked out once per user model and
connection, not on every request; where migration 0010 installed it, the lookup is a call of a
PL/pgSQL function whose plan the server keeps (reliableq.api.tokenfunction). With
CONN_HEALTH_CHECKS, the statement is the request's health check too (see _row): a persistent
connection found dead is replaced and the statement run again, as Django's own check would have
done before it, one round trip sooner.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DatabaseError, connections, router
from django.utils.translation import gettext_lazy as _
from rest_framework import HTTP_HEADER_ENCODING, authentication, exceptions
from rest_framework.authtoken.models import Token

from ..queue import tokens
from . import permissions, tokenfunction

MAX_KEY_CHARS = getattr(Token._meta.get_field("key"), "max_length", None) or 40
# Per connection (thread-local in Django): per user model, the converters of the columns that have any.
_CONVERTERS: weakref.WeakKeyDictionary[Any, dict[Any, list[tuple[int, Any, list[Callable[..., Any]]]]]] = (
    weakref.WeakKeyDictionary()
)


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate(self, request: Any) -> tuple[Any, Token] | None:
        """DRF's own, reading the header from META: DRF's get_authorization_header() goes through
        request.headers, which copies every header of the request on first use."""
        header = request.META.get("HTTP_AUTHORIZATION", b"")
        auth = (header.encode(HTTP_HEADER_ENCODING) if isinstance(header, str) else header).split()
        if not auth or auth[0].lower() != self.keyword.lower().encode():
            return None
        if len(auth) == 1:
            raise exceptions.AuthenticationFailed(_("Invalid token header. No credentials provided."))
        if len(auth) > 2:
            raise exceptions.AuthenticationFailed(_("Invalid token header. Token string should not contain spaces."))
        try:
            key = auth[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed(
                _("Invalid token header. Token string should not contain invalid characters.")
            ) from None
        return self.authenticate_credentials(key)

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        if "\x00" in key or len(key) > MAX_KEY_CHARS:
            # No stored token can match, and PostgreSQL refuses NUL in text (a 500, not a 401).
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user_model = get_user_model()
        with_perms = permissions.model_backend_only()
        sql, attnames = tokens.lookup_sql(
            user_model, Token._meta.db_table, permissions.CODENAME_LIST if with_perms else None
        )
        alias = router.db_for_read(Token)
        connection = connections[alias]
        # The same lookup through the function whose plan the server keeps, where it is installed.
        found = tokenfunction.positions(connection, user_model) if with_perms else None
        row = _row(connection, sql if found is None else tokenfunction.CALL, key)
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if found is not None:
            row = [*(row[i] for i in found), row[-1]]
        user = user_model.from_db(alias, attnames, _converted(connection, user_model, row[: len(attnames)]))
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        if with_perms:
            permissions.remember(user, row[len(attnames)])
        token = Token(key=key, user_id=user.pk)
        Token.user.field.set_cached_value(token, user)  # token.user is this user, with no query
        return user, token


def _row(connection: Any, sql: str, key: str) -> Any:
    """The statement's row, the statement standing in for the request's connection health check.

    With CONN_HEALTH_CHECKS, Django sends `SELECT 1` before a request's first statement on a
    persistent connection, and reconnects when that fails. This read-only statement is that
    first statement: if it fails and the connection then proves unusable, the connection is
    closed and the statement runs again on a new one, which is what the check would have done
    (a failure on a live connection is raised as it is). Inside a transaction (ATOMIC_REQUESTS)
    Django's own check runs, unchanged.
    """
    checking = (
        connection.connection is not None
        and connection.health_check_enabled
        and not connection.health_check_done
        and not connection.in_atomic_block
    )
    if checking:
        connection.health_check_done = True
    try:
        return tokens.fetch_one(connection, sql, key)
    except DatabaseError:
        if not checking or connection.is_usable():
            raise
        connection.close()
    return tokens.fetch_one(connection, sql, key)


def _converted(connection: Any, user_model: Any, values: Any) -> Any:
    """Column values as the ORM would hand them to the model: each field's database converters applied."""
    per_model = _CONVERTERS.setdefault(connection, {})
    converters = per_model.get(user_model)
    if converters is None:
        converters = per_model[user_model] = [
            (i, field, found)
            for i, field in enumerate(user_model._meta.concrete_fields)
            if (found := field.get_db_converters(connection))
        ]
    if not converters:
        return values
    out = list(values)
    for i, field, chain in converters:
        value = out[i]
        for convert in chain:
            value = convert(value, field, connection)
        out[i] = value
    return out
