"""manage.py reliableq_queue list | pause NAME [--until ISO] | resume NAME: the same services as the
API, errors as CommandError (never a traceback)."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import reliableq
from reliableq import services
from reliableq.models import QueueState

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("reliableq_queue", *args, stdout=out)
    return out.getvalue()


def test_list_prints_each_queue_with_its_pause_state_and_counts() -> None:
    reliableq.enqueue("demo.noop", {}, queue="mail")
    reliableq.enqueue("demo.noop", {}, queue="mail")
    services.pause("reports")

    lines = run("list").splitlines()

    assert lines[0].split() == ["queue", "paused", "until", "pending", "running", "oldest", "due", "age"]
    mail = next(line.split() for line in lines if line.startswith("mail"))
    assert mail[:5] == ["mail", "no", "-", "2", "0"] and mail[5].endswith("s")
    reports = next(line.split() for line in lines if line.startswith("reports"))
    assert reports[:5] == ["reports", "yes", "-", "0", "0"]


def test_list_of_no_queues_says_so() -> None:
    assert "No queues" in run("list")


def test_pause_until_and_resume() -> None:
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)).replace(microsecond=0)

    assert "Paused mail until" in run("pause", "mail", "--until", until.isoformat())
    state = QueueState.objects.get(name="mail")
    assert state.paused_until == until and services.paused_queues() == {"mail"}
    assert "yes" in next(line for line in run("list").splitlines() if line.startswith("mail"))

    assert "Resumed mail" in run("resume", "mail")
    assert services.paused_queues() == set()


def test_pause_without_until_holds_until_resumed() -> None:
    assert "until resumed" in run("pause", "mail")
    assert QueueState.objects.get(name="mail").paused_until is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("pause", "no spaces"), "queue must be"),
        (("resume", "x" * 101), "queue must be"),
        (("pause", "mail", "--until", "tomorrow"), "--until must be an ISO 8601 time"),
        (("pause", "mail", "--until", "2030-01-01T12:00:00"), "naive times are ambiguous"),
        (("pause", "mail", "--until", "9999-01-01T00:00:00Z"), "MAX_SCHEDULE_SECONDS"),
    ],
)
def test_bad_arguments_are_command_errors_that_say_why(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not QueueState.objects.exists()


def test_an_unknown_action_is_a_command_error() -> None:
    with pytest.raises(CommandError):
        run("stop", "mail")
