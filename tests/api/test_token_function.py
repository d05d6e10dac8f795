"""The token lookup runs as a PL/pgSQL function whose plan the server keeps (migration 0010), and
answers exactly as the plain statement does: the same user, the same permissions, a revoked
permission or a deleted token seen on the very next request. Where the function is missing or
does not fit the user table, the plain statement is sent instead."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.db import connection, connections, router
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed

from reliableq.api import permissions, tokenfunction
from reliableq.api.authentication import TokenAuthentication
from reliableq.queue import db
from testproject import accounts

from .conftest import problem_of, token_client

pytestmark = pytest.mark.django_db
JOB = {"kind": "demo.noop", "payload": {}}


@pytest.fixture(autouse=True)
def ask_afresh(request: Any) -> Any:
    if router.db_for_read(Token) != db.alias() and "migration" not in request.node.name:
        pytest.skip("the queue is on a database of its own: the user table, and the lookup, are elsewhere")
    tokenfunction.forget()
    yield
    tokenfunction.forget()


def lookup(key: str, *, function: bool) -> tuple[User, str, list[str]]:
    """Authenticate `key` through the function or the plain statement; the user, the SQL sent, the permissions."""
    if not function:
        tokenfunction._POSITIONS[tokenfunction._key(connection, get_user_model())] = None
    else:
        assert tokenfunction.positions(connection, get_user_model()) is not None, "migration 0010 installed it"
    with CaptureQueriesContext(connection) as queries:
        user, _ = TokenAuthentication().authenticate_credentials(key)
    held = sorted(perm for perm in permissions.CHECKED if permissions.holds(user, perm))
    assert len(queries) == 1, [q["sql"] for q in queries]
    tokenfunction.forget()
    return user, queries[0]["sql"], held


def test_the_lookup_calls_the_function_in_one_statement():
    key = Token.objects.create(user=accounts.grant(User.objects.create_user("u"), "reliableq.submit_job")).key
    user, sql, held = lookup(key, function=True)
    assert f"{tokenfunction.NAME}(" in sql
    assert (user.username, held) == ("u", ["reliableq.submit_job"])
    user, sql, _ = lookup(key, function=False)
    assert tokenfunction.NAME not in sql and user.username == "u"


def test_the_function_and_the_plain_statement_answer_alike():
    group = Group.objects.create(name="operators")
    group.permissions.add(*Permission.objects.filter(codename__in=["replay_job", "view_charge"]))
    direct = accounts.grant(User.objects.create_user("direct", email="d@example.com"), "reliableq.view_job")
    direct.groups.add(group)
    root = User.objects.create_superuser("root", email="r@example.com", password=None)
    plain = User.objects.create_user("plain", first_name="Ann", last_name="Lee")
    for person in (direct, root, plain):
        key = Token.objects.create(user=person).key
        through_function, through_statement = lookup(key, function=True), lookup(key, function=False)
        fields = [f.attname for f in get_user_model()._meta.concrete_fields]
        assert [getattr(through_function[0], f) for f in fields] == [getattr(through_statement[0], f) for f in fields]
        assert through_function[2] == through_statement[2], person.username
    assert lookup(Token.objects.get(user=direct).key, function=True)[2] == [
        "charges.view_charge", "reliableq.replay_job", "reliableq.view_job",
    ]  # fmt: skip
    assert len(lookup(Token.objects.get(user=root).key, function=True)[2]) == len(permissions.CHECKED)


@pytest.mark.parametrize("function", [True, False], ids=["function", "statement"])
def test_an_unknown_token_and_an_inactive_user_are_refused_alike(function: bool):
    idle = User.objects.create_user("idle", is_active=False)
    key = Token.objects.create(user=idle).key
    with pytest.raises(AuthenticationFailed, match="inactive"):
        lookup(key, function=function)
    with pytest.raises(AuthenticationFailed, match="Invalid token"):
        lookup("0" * 40, function=function)


def test_a_revoked_permission_and_a_deleted_token_are_seen_on_the_next_request():
    user = accounts.grant(User.objects.create_user("u"), "reliableq.submit_job")
    client = token_client(user)
    assert tokenfunction.positions(connection, get_user_model()) is not None
    assert client.post("/v1/jobs", JOB, format="json").status_code == 202
    user.user_permissions.clear()
    problem_of(client.post("/v1/jobs", JOB, format="json"), 403)
    accounts.grant(user, "reliableq.submit_job")
    assert client.post("/v1/jobs", JOB, format="json").status_code == 202
    Token.objects.filter(user=user).delete()
    problem_of(client.post("/v1/jobs", JOB, format="json"), 401)


def test_without_the_function_requests_send_the_plain_statement():
    user = accounts.grant(User.objects.create_user("u"), "reliableq.submit_job")
    with connection.cursor() as cursor:
        cursor.execute(tokenfunction.drop_sql())  # rolled back with the test's transaction
    assert tokenfunction.positions(connection, get_user_model()) is None
    with CaptureQueriesContext(connection) as queries:
        assert token_client(user).post("/v1/jobs", JOB, format="json").status_code == 202
    assert not any(tokenfunction.NAME in q["sql"] for q in queries)


def test_a_column_added_to_the_user_table_is_found_by_name():
    """The function returns the table's row as it is now: a column the model does not know is skipped."""
    user = accounts.grant(User.objects.create_user("u", email="u@example.com"), "reliableq.submit_job")
    key = Token.objects.create(user=user).key
    table = get_user_model()._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} ADD COLUMN added_by_someone int DEFAULT 7")  # rolled back
    found, sql, held = lookup(key, function=True)
    assert tokenfunction.NAME in sql
    assert (found.pk, found.email, held) == (user.pk, "u@example.com", ["reliableq.submit_job"])


@pytest.mark.django_db(transaction=True)
def test_the_migration_creates_the_function_where_the_user_table_is_and_unapplying_drops_it():
    alias = db.alias()
    here = router.db_for_read(Token) == alias

    def installed() -> bool:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT to_regprocedure(%s) IS NOT NULL", [tokenfunction.SIGNATURE])
            return bool(cursor.fetchone()[0])

    assert installed() is here  # with the queue on a database of its own, the user table is elsewhere
    try:
        call_command("migrate", "reliableq", "0009", database=alias, verbosity=0)
        assert not installed()
    finally:
        call_command("migrate", "reliableq", database=alias, verbosity=0)
    assert installed() is here
