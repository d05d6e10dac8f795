"""Schedules against the real PostgreSQL: the rows code declares, the leader's round (one job per
slot, whoever makes it), overlap, and the operator's changes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model

import reliableq
from reliableq import registry, scheduler, schedules
from reliableq.errors import InvalidJob, WrongStatus
from reliableq.models import Job, JobStatus, Schedule
from testproject.jobs import every_second

from .helpers import db_now, spawn

UTC = dt.timezone.utc
LATE = 16.0  # the leader's bound with the default intervals: 2 x (5 s + 3 s)
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def declarations() -> Iterator[None]:
    """The schedules and handlers a test declares are forgotten after it."""
    saved, handlers = dict(schedules._declared), dict(registry._handlers)
    schedules._declared.clear()
    for kind, found in list(registry._handlers.items()):
        if found.cron:
            registry._handlers.pop(kind)  # other modules' cron handlers: not this test's schedules
    reliableq.handler("test.periodic")(every_second)
    yield
    schedules._declared.clear()
    schedules._declared.update(saved)
    registry._handlers.clear()
    registry._handlers.update(handlers)


def make(name: str = "nightly", **fields: object) -> Schedule:
    values = {"kind": "test.periodic", "cron": "* * * * * *", **fields}
    return schedules.save(Schedule(name=name, **values))


def rewind(schedule: Schedule, seconds: float) -> dt.datetime:
    """The state a round finds after `seconds` without one: the next slot that long ago."""
    slot = db_now().replace(microsecond=0) - dt.timedelta(seconds=seconds)
    Schedule.objects.filter(pk=schedule.pk).update(next_slot=slot)
    return slot


def test_code_declarations_become_rows_and_an_operators_enabled_survives():
    reliableq.schedule("reports.eu", cron="0 7 * * 1-5", kind="test.periodic", payload={"scope": "eu"},
                       timezone="Europe/Paris", catch_up="all", overlap="skip")  # fmt: skip
    reliableq.handler("test.cleanup", cron="*/10 * * * *")(every_second)
    created, updated, deleted = schedules.sync()
    assert sorted(created) == ["reports.eu", "test.cleanup"] and updated == deleted == []
    row = Schedule.objects.get(name="reports.eu")
    assert (row.kind, row.payload, row.timezone, row.catch_up, row.overlap, row.from_code) == (
        "test.periodic", {"scope": "eu"}, "Europe/Paris", "all", "skip", True,
    )  # fmt: skip
    assert row.next_slot.astimezone(ZoneInfo("Europe/Paris")).hour == 7  # 07:00 in Paris, whatever the offset
    assert Schedule.objects.get(name="test.cleanup").cron == "*/10 * * * *"

    schedules.set_enabled("reports.eu", False)
    stamp = Schedule.objects.get(name="test.cleanup").updated_at
    assert schedules.sync() == ([], [], [])  # a fleet's starts leave unchanged rows unwritten
    assert Schedule.objects.get(name="test.cleanup").updated_at == stamp
    assert not Schedule.objects.get(name="reports.eu").enabled

    schedules._declared.clear()
    reliableq.schedule("reports.eu", cron="0 8 * * 1-5", kind="test.periodic")
    assert schedules.sync() == ([], ["reports.eu"], [])
    row = Schedule.objects.get(name="reports.eu")
    assert (row.cron, row.enabled, row.next_slot) == ("0 8 * * 1-5", False, None)  # still disabled by its operator

    registry._handlers.pop("test.cleanup")
    assert schedules.sync() == ([], [], ["test.cleanup"])  # declared no more: its row goes


def test_an_operators_schedule_is_left_alone_by_a_sync():
    make("made-in-admin")
    assert schedules.sync() == ([], [], [])
    assert Schedule.objects.filter(name="made-in-admin", from_code=False).exists()


def test_a_round_makes_one_job_per_slot_with_the_slot_in_its_payload_and_key():
    schedule = make(payload={"scope": "eu"}, timezone="Europe/Paris")
    since = rewind(schedule, 7)  # a round that came 7 s late
    scheduler.serve(late_seconds=LATE)
    jobs = list(Job.objects.filter(kind="test.periodic").order_by("run_at"))
    now = db_now()
    assert len(jobs) in (8, 9)  # 7 s ago .. now, and the next slot if it is within a second
    assert jobs[0].run_at >= since
    for job in jobs:
        slot = dt.datetime.fromisoformat(job.payload["scheduled_for"])
        assert job.payload == {"scope": "eu", "scheduled_for": slot.isoformat(), "schedule": "nightly"}
        assert slot.utcoffset() in (dt.timedelta(hours=1), dt.timedelta(hours=2))  # Paris time
        assert job.dedupe_key == f"schedule:nightly:{slot.astimezone(UTC).isoformat()}"
    assert [j.payload["scheduled_for"] for j in jobs] == sorted({j.payload["scheduled_for"] for j in jobs})
    row = Schedule.objects.get(pk=schedule.pk)
    assert row.last_job == jobs[-1].id and row.last_slot == dt.datetime.fromisoformat(jobs[-1].payload["scheduled_for"])
    assert row.next_slot == row.last_slot + dt.timedelta(seconds=1) and row.next_slot > now
    scheduler.serve(late_seconds=LATE)  # again: the slots made are not made twice, the next ones are
    keys = list(Job.objects.filter(kind="test.periodic").values_list("dedupe_key", flat=True))
    assert len(keys) == len(set(keys)) and {j.dedupe_key for j in jobs} <= set(keys)


def test_two_leaders_rounds_at_once_make_one_job_per_slot():
    schedule = make()
    rewind(schedule, 10)
    futures = [spawn(scheduler.serve, late_seconds=LATE) for _ in range(8)]
    for future in futures:
        future.result(timeout=60)
    keys = list(Job.objects.filter(kind="test.periodic").values_list("dedupe_key", flat=True))
    assert len(keys) == len(set(keys)) >= 11


def test_a_slot_made_already_is_found_not_made_twice():
    schedule = make()
    slot = rewind(schedule, 3)
    made = reliableq.enqueue("test.periodic", {}, dedupe_key=scheduler.slot_key("nightly", slot))
    scheduler.serve(late_seconds=LATE)
    assert Job.objects.filter(dedupe_key=scheduler.slot_key("nightly", slot)).get().id == made.id


def test_overlap_skip_makes_no_job_while_the_previous_one_is_pending_or_running():
    schedule = make(overlap="skip")
    rewind(schedule, 5)
    scheduler.serve(late_seconds=LATE)
    (first,) = Job.objects.filter(kind="test.periodic")  # the oldest slot; the rest skipped
    assert first.unique_key == "schedule:nightly"
    Job.objects.filter(pk=first.pk).update(status=JobStatus.SUCCEEDED, finished_at=db_now())
    rewind(schedule, 0)
    scheduler.serve(late_seconds=LATE)
    assert Job.objects.filter(kind="test.periodic").count() == 2


def test_a_disabled_schedule_makes_no_job_and_enabling_it_skips_the_slots_it_was_off():
    schedule = make()
    schedules.set_enabled("nightly", False)
    assert Schedule.objects.get(pk=schedule.pk).next_slot is None
    scheduler.serve(late_seconds=LATE)
    assert not Job.objects.exists()
    enabled = schedules.set_enabled("nightly", True)
    assert enabled.next_slot is not None and enabled.next_slot > db_now() - dt.timedelta(seconds=1)


def test_a_schedule_whose_kind_this_process_cannot_run_waits_untouched():
    schedule = make()
    since = rewind(schedule, 2)
    registry._handlers.pop("test.periodic")
    assert scheduler.serve(late_seconds=LATE) is None
    assert not Job.objects.exists() and Schedule.objects.get(pk=schedule.pk).next_slot == since


def test_run_now_makes_one_job_at_once_and_respects_overlap_skip():
    user = get_user_model().objects.create_user("operator")
    make(overlap="skip", payload={"scope": "eu"})
    job = schedules.run_now("nightly", by=user)
    assert job.status == JobStatus.PENDING and job.payload["schedule"] == "nightly" and job.payload["scope"] == "eu"
    assert LogEntry.objects.filter(user=user, change_message=f"Ran now: job {job.id}.").exists()
    with pytest.raises(WrongStatus, match="does not allow overlap"):
        schedules.run_now("nightly", by=user)
    assert Job.objects.count() == 1


@pytest.mark.django_db  # the rules read no table: no flush per case
@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cron": "61 * * * *"}, "cron", "Invalid cron expression"),
        ({"cron": "* * * * * * *"}, "cron", "at most once a second"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"kind": "test.periodik"}, "kind", "Did you mean 'test.periodic'"),
        ({"kind": "django.task:testproject.tasks.add"}, "kind", "runs Django Tasks"),
        ({"payload": {"bad": "\x00"}}, "payload", "NUL"),
        ({"payload": {"when": dt.datetime(2030, 1, 1)}}, "payload", "not JSON-serializable"),
        ({"payload": {"schedule": "mine"}}, "payload", "gets them from its schedule"),
        ({"payload": {"big": "x" * 65_500}}, "payload", "limit is 65536"),
        ({"catch_up": "some"}, "catch_up", "latest, all, none"),
        ({"overlap": "never"}, "overlap", "allow, skip"),
        ({"queue": "no spaces"}, "queue", "queue must be"),
        ({"priority": 5000}, "priority", "priority must be"),
        ({"name": ""}, "name", "name"),
    ],
)
def test_bad_input_is_an_invalid_job_that_names_the_field(fields, field, says):
    values = {"name": "nightly", "kind": "test.periodic", "cron": "* * * * *", **fields}
    with pytest.raises(InvalidJob, match=says) as caught:
        schedules.check(**values)
    assert caught.value.field == field
    if "periodik" not in str(fields):  # code may declare a kind another app registers later: a check error
        with pytest.raises(InvalidJob, match=says):
            reliableq.schedule(values.pop("name"), **values)


def test_a_declaration_of_an_unknown_kind_is_a_check_error():
    from reliableq.schedule_checks import check_declared_schedules

    reliableq.schedule("typo", cron="* * * * *", kind="test.periodik")
    reliableq.handler("test.both", cron="* * * * *")(every_second)
    reliableq.schedule("test.both", cron="0 * * * *", kind="test.periodic")
    errors = check_declared_schedules()
    assert [e.id for e in errors] == ["reliableq.E010", "reliableq.E011"]
    assert "'typo'" in errors[0].msg and "Did you mean 'test.periodic'" in errors[0].msg


def test_a_schedule_declared_in_code_changes_only_its_enabled_outside_the_code():
    reliableq.schedule("coded", cron="* * * * *", kind="test.periodic")
    schedules.sync()
    row = Schedule.objects.get(name="coded")
    row.cron = "0 * * * *"
    with pytest.raises(InvalidJob, match="declared in code") as caught:
        schedules.save(row, changed=frozenset({"cron"}))
    assert caught.value.field == "cron"
    row.enabled = False
    assert schedules.save(row, changed=frozenset({"enabled"})).next_slot is None


def test_a_row_the_round_cannot_serve_is_parked_and_the_others_are_served(caplog):
    broken, fine = make("broken"), make("fine")
    rewind(broken, 1)
    rewind(fine, 1)
    Schedule.objects.filter(pk=broken.pk).update(payload=[1, 2])  # edited by hand: not an object
    scheduler.serve(late_seconds=LATE)
    assert Schedule.objects.get(pk=broken.pk).next_slot is None  # parked until saved again
    assert Job.objects.filter(payload__schedule="fine").exists()
    assert "schedule broken is parked" in caplog.text
