"""Accounts of the demo, the tests and the benchmarks: a user with exactly the permissions named."""

from __future__ import annotations

import secrets

from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token

# What a submitting client holds in the demo: it may submit jobs and read them, never make charges.
SUBMITTER_PERMISSIONS = ("reliableq.submit_job", "reliableq.view_job")
# What the charge job's service account holds: it makes and reads charges, and submits nothing
# (docs/explanation/security.md: a submitter who could charge could pre-empt a job's effect key).
CHARGE_SERVICE_PERMISSIONS = ("charges.add_charge", "charges.view_charge")
CLIENT_PERMISSIONS = SUBMITTER_PERMISSIONS + CHARGE_SERVICE_PERMISSIONS  # one test user holding both
# What the tour's operator holds: watch, replay and cancel jobs, pause queues, read charges. Not a superuser.
OPERATOR_PERMISSIONS = (
    "reliableq.view_job",
    "reliableq.replay_job",
    "reliableq.cancel_job",
    "reliableq.pause_queue",
    "charges.view_charge",
)


def grant(user: User, *perms: str) -> User:
    """Give `user` these "app_label.codename" permissions (an unknown one is an error, not a silent no-op)."""
    wanted = {tuple(perm.split(".", 1)) for perm in perms}
    found = [
        p for p in Permission.objects.select_related("content_type") if (p.content_type.app_label, p.codename) in wanted
    ]
    if len(found) != len(wanted):
        missing = wanted - {(p.content_type.app_label, p.codename) for p in found}
        raise LookupError(f"No such permission(s): {sorted('.'.join(m) for m in missing)}")
    user.user_permissions.add(*found)
    return user


def token_for(username: str, *perms: str, **fields: object) -> str:
    """The API token of `username` (made if missing) holding exactly these permissions."""
    user, _ = User.objects.get_or_create(username=username, defaults=fields)
    user.user_permissions.clear()  # an account left by an earlier run keeps nothing it no longer needs
    grant(user, *perms)
    return Token.objects.get_or_create(user=user)[0].key


def operator(username: str) -> tuple[User, str]:
    """Make `username` a staff operator with exactly OPERATOR_PERMISSIONS and a new random password.

    The password is generated on every call, never fixed: a tour left running on a shared machine
    must not open its admin to a password printed in a README.
    """
    user, _ = User.objects.get_or_create(username=username)
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.is_staff, user.is_superuser, user.is_active = True, False, True
    user.save()
    user.user_permissions.clear()
    grant(user, *OPERATOR_PERMISSIONS)
    return user, password
