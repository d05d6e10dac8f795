"""DRF token authentication in one statement: the user, and the permissions the API checks.

DRF's TokenAuthentication reads the token with its user through the ORM; on the submission path
that, and the permission queries after it, cost more than the job's INSERT. This reads the same
rows (rest_framework.authtoken's Token, the user model) with one raw statement (each column
through its field's converters, as the ORM would), fetches the
user's permissions in it when Django's ModelBackend is the only backend, and answers exactly
as DRF does: 401 for an unknown token or an inactive user.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections, router
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from . import permissions


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        user_model = get_user_model()
        meta = user_model._meta
        pk = meta.pk.column
        with_perms = permissions.model_backend_only()
        held_sql = permissions.held_sql(f"u.{pk}") if with_perms else "NULL"
        fields = meta.concrete_fields
        columns = ", ".join(f"u.{field.column}" for field in fields)
        alias = router.db_for_read(Token)
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"SELECT {columns}, {held_sql} FROM {meta.db_table} u"
                f" JOIN {Token._meta.db_table} t ON t.user_id = u.{pk} WHERE t.key = %s",
                [permissions.APPS, key] if with_perms else [key],
            )
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user = user_model.from_db(alias, [f.attname for f in fields], _converted(alias, row[: len(fields)]))
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        if with_perms:
            permissions.remember(user, row[len(fields)])
        return user, Token(key=key, user=user)


def _converted(alias: str, values: Any) -> list[Any]:
    """Column values as the ORM would hand them to the model: each field's database converters applied."""
    connection = connections[alias]
    out = []
    for field, value in zip(get_user_model()._meta.concrete_fields, values, strict=True):
        for convert in field.get_db_converters(connection):
            value = convert(value, field, connection)
        out.append(value)
    return out
