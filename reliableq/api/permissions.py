"""Who may do what: Django permissions, checked in one query per request.

`user.has_perm()` through Django's ModelBackend loads every permission of the user and of each
of its groups (two queries with joins) before answering; on the submission path that was most
of a request's cost. Where ModelBackend is the only authentication backend, the API asks the
database once, with the token lookup (reliableq.api.authentication), for just the permissions
it checks, by ModelBackend's own rules (an inactive user holds none, a superuser holds all, a
permission comes from the user or one of its groups), and keeps the answer on the user object
for the rest of the request. With any other backend (LDAP, object permissions, rules...) it
asks `user.has_perm()`, as Django would.
"""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections, router
from rest_framework.permissions import BasePermission

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
# Everything the API checks, fetched together: one request often needs two (submit, then view
# for the tracebacks in its answer).
CHECKED = (
    "reliableq.submit_job", "reliableq.view_job", "reliableq.replay_job", "reliableq.cancel_job",
    "reliableq.pause_queue", "reliableq.emit_event", "charges.add_charge", "charges.view_charge",
)  # fmt: skip
_CACHE = "_reliableq_perms"
# Written into held_sql as literals: a list parameter costs more to adapt than the statement to run.
CODENAME_LIST = sorted({perm.split(".", 1)[1] for perm in CHECKED})
CODENAMES = ", ".join(f"'{codename}'" for codename in CODENAME_LIST)


def holds(user: Any, perm: str) -> bool:
    """Whether `user` holds `perm` ("app_label.codename"), as user.has_perm(perm) would answer."""
    if user is None or not user.is_active:
        return False
    if user.is_superuser:
        return True
    if perm not in CHECKED or not model_backend_only():
        return bool(user.has_perm(perm))
    held = getattr(user, _CACHE, None)
    if held is None:
        held = _fetch(user)
        setattr(user, _CACHE, held)
    return perm in held


def model_backend_only() -> bool:
    return list(getattr(settings, "AUTHENTICATION_BACKENDS", [MODEL_BACKEND])) == [MODEL_BACKEND]


def held_sql(user_id: str, codenames: str = f"IN ({CODENAMES})", user_model: Any = None) -> str:
    """SQL: a text[] of the "app_label.codename" permissions named in CHECKED that the user
    `user_id` holds directly or through a group (no parameter; the caller keeps the names of
    CHECKED only: the same codename in another app is fetched, then dropped). Names come from the
    permission rows themselves, never from ids remembered between requests, which a flush or a
    re-migration would give to other permissions.

    Written as nested scalar subqueries over primary keys and the user's foreign-key indexes, not
    as one join: it runs on every API request without a prepared plan (a pooler in transaction
    mode could not keep one), and PostgreSQL plans each small subquery with no join search. As a
    five-table join with a UNION it took about 170 us to plan and 100 us to run; this, about 115
    and 40 (EXPLAIN ANALYZE on PostgreSQL 15, a warm connection). Where it can, the token lookup
    runs it inside a PL/pgSQL function whose plan the server keeps (reliableq.api.tokenfunction).

    `codenames` is the test applied to each permission's codename (the token function passes
    `= ANY(<its parameter>)`).
    """
    return _held_sql(user_model or get_user_model(), user_id, codenames)


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


def remember(user: Any, held: Any) -> None:
    """Keep permissions fetched along with the user (by the token lookup) for this request."""
    if held is not None:
        setattr(user, _CACHE, frozenset(held).intersection(CHECKED))


def _fetch(user: Any) -> frozenset[str]:
    """The CHECKED permissions the user holds directly or through a group: one statement."""
    with connections[router.db_for_read(Permission)].cursor() as cursor:
        cursor.execute(f"SELECT {held_sql('%s')}", [user.pk, user.pk])
        return frozenset(cursor.fetchone()[0]).intersection(CHECKED)


@functools.cache
def requires(perm: str) -> type[BasePermission]:
    """A DRF permission class: the user holds `perm` ("app_label.codename").

    One class per permission, made once: views ask for it on every request.
    """

    class HasPermission(BasePermission):
        message = f"This needs the {perm} permission."

        def has_permission(self, request: Any, view: Any) -> bool:
            return holds(request.user, perm)

    HasPermission.__name__ = f"Has_{perm.replace('.', '_')}"
    return HasPermission
