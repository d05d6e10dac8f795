"""DATABASE_URL <-> DATABASES entries (testproject/dburl.py)."""

from __future__ import annotations

import pytest

from testproject import dburl


def test_parse_tcp_url_with_escaped_credentials_port_and_options() -> None:
    db = dburl.parse("postgres://app%40corp:p%40ss%3Aw0rd@db.example.com:5433/jobs?sslmode=require&connect_timeout=5")
    assert db == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "jobs",
        "USER": "app@corp",
        "PASSWORD": "p@ss:w0rd",
        "HOST": "db.example.com",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require", "connect_timeout": "5"},
    }


def test_parse_socket_directory_from_the_host_query_parameter() -> None:
    db = dburl.parse("postgresql://postgres@/queue?host=/tmp/pg-sock")
    assert db["HOST"] == "/tmp/pg-sock"
    assert db["NAME"] == "queue"
    assert db["OPTIONS"] == {}


def test_parse_defaults_user_and_database_to_postgres() -> None:
    db = dburl.parse("postgresql://localhost")
    assert (db["USER"], db["NAME"], db["HOST"], db["PORT"], db["PASSWORD"]) == (
        "postgres",
        "postgres",
        "localhost",
        "",
        "",
    )


def test_parse_sqlite_for_checks() -> None:
    assert dburl.parse("sqlite:////tmp/x/db.sqlite3") == {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": "/tmp/x/db.sqlite3",
    }
    assert dburl.parse("sqlite://")["NAME"] == ":memory:"


@pytest.mark.parametrize("url", ["mysql://u@h/db", "http://h/db", "db.example.com/jobs"])
def test_parse_refuses_other_schemes(url: str) -> None:
    with pytest.raises(ValueError, match="must start with postgres://"):
        dburl.parse(url)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:s3cret@db.example.com:5433/jobs?sslmode=require",
        "postgresql://postgres@/queue?host=%2Ftmp%2Fpg-sock",
        "postgresql://app:p%40ss%3Aw0rd@127.0.0.1/jobs",
        "postgresql://postgres@localhost/postgres",
    ],
)
def test_build_round_trips_through_parse(url: str) -> None:
    db = dburl.parse(url)
    assert dburl.parse(dburl.build(db)) == db


def test_build_can_name_another_database() -> None:
    db = dburl.parse("postgresql://app:pw@h:5432/jobs")
    assert dburl.parse(dburl.build(db, name="test_jobs"))["NAME"] == "test_jobs"
    assert db["NAME"] == "jobs"


def test_build_round_trips_a_password_with_a_slash() -> None:
    db = dburl.parse("postgresql://app:a%2Fb@h:5432/jobs")
    assert db["PASSWORD"] == "a/b"
    assert dburl.parse(dburl.build(db)) == db


def test_build_keeps_the_port_of_a_socket_directory() -> None:
    db = dburl.parse("postgresql://postgres@:5433/queue?host=/tmp/pg-sock")
    assert db["PORT"] == "5433"
    assert dburl.parse(dburl.build(db)) == db


def test_a_libpq_host_list_survives_the_round_trip() -> None:
    """A failover pair's entry (tests/failover/pair.py): both hosts and ports, target_session_attrs in OPTIONS."""
    db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "app",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "10.0.0.1,10.0.0.2",
        "PORT": "5432,5433",
        "OPTIONS": {"target_session_attrs": "read-write"},
    }
    assert dburl.parse(dburl.build(db)) == db
