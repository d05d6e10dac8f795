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
from rest_framework.permissions import BasePermission

from ..queue import tokens

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"
# Everything the API checks, fetched together: one request often needs two (submit, then view
# for the tracebacks in its answer).
CHECKED = (
    "reliableq.submit_job", "reliableq.view_job", "reliableq.replay_job", "reliableq.cancel_job",
    "reliableq.pause_queue", "reliableq.emit_event", "charges.add_charge", "charges.view_charge",
)  # fmt: skip
_CACHE = "_reliableq_perms"
# The codenames fetched (the same codename in another app is fetched, then dropped).
CODENAME_LIST = tuple(sorted({perm.split(".", 1)[1] for perm in CHECKED}))


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


def remember(user: Any, held: Any) -> None:
    """Keep permissions fetched along with the user (by the token lookup) for this request."""
    if held is not None:
        setattr(user, _CACHE, frozenset(held).intersection(CHECKED))


def _fetch(user: Any) -> frozenset[str]:
    """The CHECKED permissions the user holds directly or through a group: one statement."""
    return frozenset(tokens.fetch_held(user.pk, CODENAME_LIST, get_user_model())).intersection(CHECKED)


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
