"""QueueRouter and the check that asks for it: the queue's tables on RELIABLEQ["DATABASE"] only."""

from __future__ import annotations

from django.db.utils import ConnectionRouter
from django.test import override_settings

from reliableq import checks
from reliableq.models import Attempt, Job
from reliableq.routers import QueueRouter

ALIASES = ["default", "queue", "direct"]


class RefuseEverything:
    def allow_migrate(self, database: str, app_label: str, **hints: object) -> bool:
        return False


@override_settings(RELIABLEQ={"DATABASE": "queue"})
def test_the_router_keeps_the_queues_tables_on_its_database_and_nothing_else_there() -> None:
    router = QueueRouter()
    assert [router.allow_migrate(alias, "reliableq", "job") for alias in ALIASES] == [False, True, False]
    assert router.allow_migrate("queue", "auth", "user") is False
    assert router.allow_migrate("default", "auth", "user") is None  # not the router's business
    assert (router.db_for_read(Job), router.db_for_write(Attempt)) == ("queue", "queue")


@override_settings(RELIABLEQ={"DATABASE": "default"})
def test_with_the_queue_on_default_the_router_changes_nothing_for_other_apps() -> None:
    router = QueueRouter()
    assert router.allow_migrate("default", "reliableq", "job") is True
    assert router.allow_migrate("default", "auth", "user") is None
    assert router.allow_migrate("other", "reliableq", "job") is False


def test_on_default_the_check_has_nothing_to_say_about_routing() -> None:
    assert checks.migration_messages(ALIASES, "default", ConnectionRouter([])) == []


def test_without_the_router_migrate_would_put_the_tables_on_every_database_a_warning_says_so() -> None:
    [warning] = checks.migration_messages(ALIASES, "queue", ConnectionRouter([]))
    assert warning.id == "reliableq.W001"
    assert "also create ReliableQ's tables on 'default', 'direct'" in warning.msg
    assert "reliableq.routers.QueueRouter" in warning.hint


@override_settings(RELIABLEQ={"DATABASE": "queue"})
def test_with_the_router_the_check_is_content() -> None:
    assert checks.migration_messages(ALIASES, "queue", ConnectionRouter([QueueRouter()])) == []


def test_routers_that_never_migrate_the_queue_where_it_lives_are_an_error() -> None:
    [error] = checks.migration_messages(ALIASES, "queue", ConnectionRouter([RefuseEverything()]))
    assert error.id == "reliableq.E004"
    assert "migrate --database queue" in error.hint
