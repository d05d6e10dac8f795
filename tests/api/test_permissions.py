"""The API's permission check answers as Django's ModelBackend would, in one query with the token
lookup: from the user or a group, never for an inactive user, always for a superuser; with any
other backend configured it defers to user.has_perm()."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from reliableq.api import permissions
from testproject import accounts

from .conftest import problem_of

pytestmark = pytest.mark.django_db
JOB = {"kind": "demo.noop", "payload": {}}


def client(user: User) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return c


def test_a_permission_held_through_a_group_is_honoured():
    group = Group.objects.create(name="submitters")
    group.permissions.add(Permission.objects.get(codename="submit_job"))
    user = User.objects.create_user("g")
    user.groups.add(group)
    assert client(user).post("/v1/jobs", JOB, format="json").status_code == 202


def test_a_superuser_holds_every_permission_and_an_inactive_user_none():
    root = User.objects.create_superuser("root", email="r@example.com", password=None)
    assert client(root).post("/v1/jobs", JOB, format="json").status_code == 202
    idle = accounts.grant(User.objects.create_user("idle"), "reliableq.submit_job")
    c = client(idle)
    User.objects.filter(pk=idle.pk).update(is_active=False)
    problem_of(c.post("/v1/jobs", JOB, format="json"), 401)


def test_the_answer_matches_has_perm_for_every_checked_permission():
    user = accounts.grant(User.objects.create_user("u"), "reliableq.view_job", "charges.add_charge")
    for perm in permissions.CHECKED:
        fresh = User.objects.get(pk=user.pk)
        assert permissions.holds(fresh, perm) == fresh.has_perm(perm), perm


def test_authentication_and_every_permission_cost_one_query():
    user = accounts.grant(User.objects.create_user("u"), "reliableq.submit_job", "reliableq.view_job")
    token = Token.objects.create(user=user).key
    from reliableq.api.authentication import TokenAuthentication

    TokenAuthentication().authenticate_credentials(token)  # the first asks, once, whether the token function is there
    with CaptureQueriesContext(connection) as queries:
        found, _ = TokenAuthentication().authenticate_credentials(token)
        assert [permissions.holds(found, p) for p in ("reliableq.submit_job", "reliableq.view_job",
                                                        "reliableq.replay_job")] == [True, True, False]  # fmt: skip
    assert len(queries) == 1, [q["sql"] for q in queries]


def test_recreated_permissions_are_read_by_name_not_by_a_remembered_id():
    user = accounts.grant(User.objects.create_user("u"), "reliableq.view_job")
    c = client(user)
    problem_of(c.post("/v1/jobs", JOB, format="json"), 403)
    # As a flush or a re-migration would: the permissions come back under other ids.
    submit = Permission.objects.get(codename="submit_job")
    submit.delete()
    Permission.objects.create(codename="submit_job", name=submit.name, content_type=submit.content_type)
    problem_of(c.post("/v1/jobs", JOB, format="json"), 403)
    accounts.grant(user, "reliableq.submit_job")
    assert c.post("/v1/jobs", JOB, format="json").status_code == 202


def test_with_another_authentication_backend_the_check_defers_to_has_perm(settings):
    settings.AUTHENTICATION_BACKENDS = ["tests.api.test_permissions.EveryoneMaySubmit"]
    assert client(User.objects.create_user("nobody")).post("/v1/jobs", JOB, format="json").status_code == 202


class EveryoneMaySubmit:
    """A backend like an LDAP or rules backend: it grants what the database does not record."""

    def authenticate(self, request, **credentials):
        return None

    def has_perm(self, user_obj, perm, obj=None):
        return perm == "reliableq.submit_job"


def test_the_submit_throttle_counts_per_user_in_fixed_windows(settings, make_client):
    from django.core.cache import cache

    cache.clear()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"reliableq_submit": "2/d"}}
    first, second = make_client("submit_job"), make_client("submit_job")
    answers = [first.post("/v1/jobs", JOB, format="json").status_code for _ in range(3)]
    assert answers == [202, 202, 429]
    assert second.post("/v1/jobs", JOB, format="json").status_code == 202, "another user has a count of its own"
    refused = first.post("/v1/jobs/batch", {"jobs": [JOB]}, format="json")
    body = problem_of(refused, 429)
    assert 0 < int(refused["Retry-After"]) <= 86400 and "throttled" in body["detail"].lower()
    cache.clear()
