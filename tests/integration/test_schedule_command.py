"""manage.py reliableq_schedule list | run NAME | enable NAME | disable NAME: the services the admin
calls, errors as CommandError (never a traceback)."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from reliableq import schedules
from reliableq.models import Job, Schedule

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("reliableq_schedule", *args, stdout=out)
    return out.getvalue()


def make(name: str, **fields: object) -> Schedule:
    return schedules.save(Schedule(name=name, kind="demo.noop", cron="0 7 * * *", **fields))


def test_list_prints_each_schedule_with_its_slots_in_its_zone() -> None:
    row = make("reports", timezone="Europe/Paris")
    Schedule.objects.filter(pk=row.pk).update(last_slot=dt.datetime(2030, 1, 7, 6, tzinfo=dt.timezone.utc))
    make("cleanup", enabled=False)
    lines = run("list").splitlines()
    assert lines[0].split() == ["name", "kind", "cron", "timezone", "enabled", "last", "slot", "next", "slot"]
    assert lines[1].split()[:2] == ["cleanup", "demo.noop"] and lines[1].split()[-3:] == ["no", "-", "-"]
    assert lines[2].split()[-2] == "2030-01-07T07:00:00+01:00" and lines[2].split()[-1].endswith(":00:00+01:00")


def test_list_pages_by_name() -> None:
    for n in range(3):
        make(f"s{n}")
    out = run("list", "--limit", "2")
    assert "More schedules: reliableq_schedule list --after s1" in out
    assert [line.split()[0] for line in run("list", "--after", "s1").splitlines()[1:]] == ["s2"]


def test_disable_enable_and_run() -> None:
    make("reports")
    assert "Disabled reports" in run("disable", "reports")
    assert Schedule.objects.get(name="reports").next_slot is None
    assert "Enabled reports; next slot " in run("enable", "reports")
    assert "Made job " in run("run", "reports")
    assert Job.objects.get(payload__schedule="reports").kind == "demo.noop"


@pytest.mark.parametrize("action", ["run", "enable", "disable"])
def test_an_unknown_name_is_a_command_error(action: str) -> None:
    with pytest.raises(CommandError, match="No schedule named 'nope'"):
        run(action, "nope")


def test_run_of_a_schedule_whose_previous_job_runs_under_skip_is_a_command_error() -> None:
    make("reports", overlap="skip")
    run("run", "reports")
    with pytest.raises(CommandError, match="does not allow overlap"):
        run("run", "reports")
    assert Job.objects.count() == 1
