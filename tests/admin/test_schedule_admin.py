"""The schedule admin: the list an operator reads, add and edit with errors on the right field,
enable, disable and run now (audited), the dashboard's failed schedules, and everyone else refused."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.test import Client

from reliableq import schedules
from reliableq.models import Job, JobStatus, Schedule

from .conftest import client_for, job_in, make_staff
from .pages import body, messages_of, rows, text

LIST = "/admin/reliableq/schedule/"
ADD = f"{LIST}add/"
VIEW = ("reliableq", "view_schedule")
CHANGE_PERM = ("reliableq", "change_schedule")

pytestmark = pytest.mark.django_db


@pytest.fixture
def scheduler_client() -> Client:
    """Staff holding reliableq.change_schedule (and view_job, to follow the job links)."""
    return client_for(make_staff("scheduler", CHANGE_PERM, ("reliableq", "view_job")))


@pytest.fixture
def reader_client() -> Client:
    return client_for(make_staff("reader", VIEW))


@pytest.fixture
def stranger_client() -> Client:
    """Staff with every job permission but none of the schedules'."""
    return client_for(make_staff("stranger", ("reliableq", "view_job"), ("reliableq", "replay_job")))


def schedule(name: str = "reports", **fields: Any) -> Schedule:
    return schedules.save(Schedule(name=name, kind=fields.pop("kind", "demo.noop"), cron="0 7 * * *", **fields))


def form(**fields: Any) -> dict[str, Any]:
    values = {"name": "reports", "kind": "demo.noop", "cron": "0 7 * * 1-5", "timezone": "Europe/Paris",
              "payload": '{"scope": "eu"}', "enabled": "on", "catch_up": "latest", "overlap": "skip",
              "queue": "default", "priority": "0"}  # fmt: skip
    values.update(fields)
    return {k: v for k, v in values.items() if v is not None}


def errors_of(response: Any) -> dict[str, str]:
    """Each field's error list text, by field name (from the admin's `field-<name>` rows)."""
    found = {}
    for chunk in body(response).split('<div class="form-row')[1:]:
        name = chunk.split("field-", 1)[1].split('"', 1)[0].split(" ", 1)[0]
        if 'class="errorlist' in chunk.split("</div>", 3)[0] + chunk:
            errors = chunk.split('class="errorlist', 1)[1].split("</ul>", 1)[0]
            if "<li>" in errors and name not in found:
                found[name] = text("<x" + errors)
    return found


def test_an_operator_adds_a_schedule_and_the_admin_audits_it(scheduler_client: Client) -> None:
    response = scheduler_client.post(ADD, form(), follow=True)
    assert response.status_code == 200 and "was added successfully" in " ".join(messages_of(response))
    row = Schedule.objects.get(name="reports")
    assert (row.kind, row.payload, row.timezone, row.overlap, row.from_code) == (
        "demo.noop", {"scope": "eu"}, "Europe/Paris", "skip", False,
    )  # fmt: skip
    assert row.next_slot is not None and row.next_slot > dt.datetime.now(dt.timezone.utc)
    entry = LogEntry.objects.get(object_id=str(row.pk), action_flag=ADDITION)
    assert entry.user.username == "scheduler"


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cron": "61 * * * *"}, "cron", "Invalid cron expression"),
        ({"cron": "* * * * * * *"}, "cron", "at most once a second"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"kind": "no.such.kind"}, "kind", "Select a valid choice"),
        ({"payload": '{"bad": "\\u0000"}'}, "payload", "NUL"),
        ({"payload": "[1, 2]"}, "payload", "JSON object"),
        ({"payload": '{"scheduled_for": "x"}'}, "payload", "gets them from its schedule"),
        ({"queue": "no spaces"}, "queue", "queue must be"),
        ({"priority": "5000"}, "priority", "priority must be"),
    ],
)
def test_bad_input_is_an_error_on_its_field_and_nothing_is_saved(scheduler_client, fields, field, says) -> None:
    response = scheduler_client.post(ADD, form(**fields))
    assert response.status_code == 200
    assert says in errors_of(response).get(field, ""), errors_of(response)
    assert not Schedule.objects.exists()


def test_the_list_shows_expression_zone_state_last_slot_with_its_jobs_status_and_next_slot(
    scheduler_client: Client,
) -> None:
    row = schedule("reports", timezone="Europe/Paris")
    dead = job_in(JobStatus.DEAD, kind="demo.noop")
    Schedule.objects.filter(pk=row.pk).update(last_slot=dt.datetime(2030, 1, 7, 6, tzinfo=dt.timezone.utc),
                                              last_job=dead.pk)  # fmt: skip
    schedule("off", enabled=False)
    listed = rows(body(scheduler_client.get(LIST)), 'id="result_list"')
    by_name = {text(r["name"]): r for r in listed}
    reports, off = by_name["reports"], by_name["off"]
    assert text(reports["cron_display"]) == "0 7 * * *" and text(reports["timezone"]) == "Europe/Paris"
    assert text(reports["last_slot_display"]) == "2030-01-07 07:00:00 +0100 DEAD"
    assert f"/admin/reliableq/job/{dead.pk}/change/" in reports["last_slot_display"]
    assert "07:00:00 +0" in text(reports["next_slot_display"]) and ", in " in text(reports["next_slot_display"])
    assert text(off["next_slot_display"]) == "disabled"


def test_enable_disable_and_run_now_are_audited_actions(scheduler_client: Client) -> None:
    row = schedule("reports")

    def act(action: str) -> Any:
        return scheduler_client.post(LIST, {"action": action, "_selected_action": [str(row.pk)], "index": "0"},
                                     follow=True)  # fmt: skip

    assert "Disabled 1 schedule(s)." in messages_of(act("disable_selected"))
    assert Schedule.objects.get(pk=row.pk).next_slot is None
    assert "Enabled 1 schedule(s)." in messages_of(act("enable_selected"))
    assert Schedule.objects.get(pk=row.pk).enabled
    said = " ".join(messages_of(act("run_now_selected")))
    job = Job.objects.get(payload__schedule="reports")
    assert f"Reports: made job {str(job.pk)[-8:]}" in said and job.status == JobStatus.PENDING
    messages = list(
        LogEntry.objects.filter(object_id=str(row.pk), action_flag=CHANGE)
        .order_by("pk")
        .values_list("change_message", flat=True)
    )
    assert messages == [schedules.DISABLED, schedules.ENABLED, f"Ran now: job {job.pk}."]


def test_an_edit_writes_the_changed_fields_and_a_new_cron_restarts_from_its_next_slot(
    scheduler_client: Client,
) -> None:
    row = schedule("reports", timezone="UTC")
    Schedule.objects.filter(pk=row.pk).update(last_slot=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc))
    response = scheduler_client.post(f"{LIST}{row.pk}/change/", form(name="renamed", cron="30 8 * * *"), follow=True)
    assert "was changed successfully" in " ".join(messages_of(response))
    row.refresh_from_db()
    assert (row.name, row.cron, row.timezone, row.payload) == ("reports", "30 8 * * *", "Europe/Paris", {"scope": "eu"})
    assert row.last_slot == dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)  # the round's progress is kept
    assert row.next_slot is not None and (row.next_slot.hour, row.next_slot.minute) in ((6, 30), (7, 30))
    assert LogEntry.objects.filter(object_id=str(row.pk), action_flag=CHANGE).count() == 1


def test_a_schedule_declared_in_code_changes_only_its_enabled_here(scheduler_client: Client) -> None:
    row = schedule("coded")
    Schedule.objects.filter(pk=row.pk).update(from_code=True)
    page = body(scheduler_client.get(f"{LIST}{row.pk}/change/"))
    assert 'name="enabled"' in page and 'name="cron"' not in page
    scheduler_client.post(f"{LIST}{row.pk}/change/", {"cron": "* * * * *"})  # no enabled: it turns off
    row.refresh_from_db()
    assert row.cron == "0 7 * * *" and not row.enabled
    assert scheduler_client.post(f"{LIST}{row.pk}/delete/", {"post": "yes"}).status_code == 403


def test_the_dashboard_lists_schedules_whose_last_job_failed(client: Client) -> None:
    row = schedule("reports")
    schedule("fine")
    dead = job_in(JobStatus.DEAD, kind="demo.noop")
    Schedule.objects.filter(pk=row.pk).update(last_slot=dt.datetime.now(dt.timezone.utc), last_job=dead.pk)
    client.force_login(make_staff("watcher", ("reliableq", "view_job")))
    page = body(client.get("/admin/reliableq/queuedashboard/"))
    listed = text(page.split('id="failed-schedules"', 1)[1].split("</table>", 1)[0])
    assert "reports" in listed and "DEAD" in listed and "fine" not in listed


# -- refusals ----------------------------------------------------------------------------------


def test_a_reader_sees_schedules_but_changes_nothing(reader_client: Client) -> None:
    row = schedule("reports")
    assert reader_client.get(LIST).status_code == 200
    assert "run_now_selected" not in body(reader_client.get(LIST))
    assert reader_client.get(ADD).status_code == 403
    assert reader_client.post(ADD, form(name="mine")).status_code == 403
    assert reader_client.post(f"{LIST}{row.pk}/change/", form(name="reports", cron="* * * * *")).status_code == 403
    assert "was changed successfully" not in body(reader_client.post(f"{LIST}{row.pk}/change/", form(), follow=True))
    reader_client.post(LIST, {"action": "disable_selected", "_selected_action": [str(row.pk)], "index": "0"})
    reader_client.post(LIST, {"action": "run_now_selected", "_selected_action": [str(row.pk)], "index": "0"})
    row.refresh_from_db()
    assert (row.cron, row.enabled) == ("0 7 * * *", True)
    assert not Job.objects.exists() and not Schedule.objects.filter(name="mine").exists()


def test_a_stranger_is_refused_every_schedule_page(stranger_client: Client) -> None:
    row = schedule("reports")
    for url in (LIST, ADD, f"{LIST}{row.pk}/change/", f"{LIST}{row.pk}/delete/"):
        assert stranger_client.get(url).status_code == 403, url
    assert stranger_client.post(ADD, form(name="mine")).status_code == 403
    assert (
        stranger_client.post(
            LIST, {"action": "run_now_selected", "_selected_action": [str(row.pk)], "index": "0"}
        ).status_code
        == 403
    )
    assert not Job.objects.exists() and Schedule.objects.count() == 1
    assert "/admin/reliableq/schedule/" not in body(stranger_client.get("/admin/"))


def test_adding_needs_change_schedule_not_django_add_permission() -> None:
    adder = client_for(make_staff("adder", VIEW, ("reliableq", "add_schedule")))
    assert adder.post(ADD, form(name="mine")).status_code == 403
    assert not Schedule.objects.exists()
