"""Replay and cancel from the admin: the confirmation page, what changes, the audit log, the permissions."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.test import Client

from reliableq import services
from reliableq.models import Attempt, Job, JobStatus

from .conftest import client_for, job_in, make_staff
from .pages import action_choices, body, job_rows, messages_of, section, text

LIST = "/admin/reliableq/job/"

pytestmark = pytest.mark.django_db


def replay_url(job: Job) -> str:
    return f"/admin/reliableq/job/{job.pk}/replay/"


def page_url(job: Job) -> str:
    return f"/admin/reliableq/job/{job.pk}/change/"


def run_action(client: Client, action: str, jobs: list[Job]) -> Any:
    """What the changelist's "Go" button posts: the action and the ticked rows."""
    return client.post(LIST, {"action": action, "_selected_action": [str(j.pk) for j in jobs], "index": "0"})


def hidden_fields(page: str) -> list[tuple[str, str]]:
    """The hidden inputs of the confirmation form, as a browser would submit them."""
    form = section(page, '<form method="post">', "</form>")
    return re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)


def confirm(client: Client, confirmation: Any) -> Any:
    """Press "Yes" on the confirmation page: post its own form back, follow the redirect."""
    fields = [(k, v) for k, v in hidden_fields(body(confirmation)) if k != "csrfmiddlewaretoken"]
    data: dict[str, list[str]] = {}
    for key, value in fields:
        data.setdefault(key, []).append(value)
    assert data.get("confirm") == ["yes"], fields
    return client.post(LIST, data, follow=True)


def snapshot(job: Job) -> tuple[Any, ...]:
    job = Job.objects.get(pk=job.pk)
    return (job.status, job.attempts, job.max_attempts, job.run_at, job.updated_at, job.finished_at)


def history(job: Job) -> list[tuple[Any, ...]]:
    return list(
        Attempt.objects.filter(job=job)
        .order_by("number")
        .values_list("id", "number", "outcome", "worker_id", "lease_token", "started_at", "finished_at", "error")
    )


def audit_entries(job: Job) -> list[LogEntry]:
    return list(LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(Job), object_id=str(job.pk)))


# -- the operator's actions -------------------------------------------------------------------


def test_operator_sees_both_actions_in_the_dropdown(operator_client: Client) -> None:
    job_in(JobStatus.DEAD)

    response = operator_client.get(LIST)

    assert action_choices(response) == ["replay_selected", "replay_from_start_selected", "cancel_selected"]
    assert "Replay selected dead jobs" in body(response)
    assert "Cancel selected jobs" in body(response)


def test_replay_confirmation_lists_the_dead_jobs_and_the_skipped_ones_and_changes_nothing(
    operator_client: Client,
) -> None:
    dead = [job_in(JobStatus.DEAD), job_in(JobStatus.DEAD)]
    pending, succeeded = job_in(JobStatus.PENDING), job_in(JobStatus.SUCCEEDED)
    before = {j.pk: snapshot(j) for j in [*dead, pending, succeeded]}

    response = run_action(operator_client, "replay_selected", [*dead, pending, succeeded])

    assert response.status_code == 200
    page = body(response)
    assert "Replay 2 job(s)?" in page
    eligible = section(page, 'id="eligible-jobs"', "</ul>")
    assert set(re.findall(r"[0-9a-f-]{36}", eligible)) == {str(j.pk) for j in dead}
    skipped = text(section(page, 'id="skipped-jobs"', "</ul>"))
    assert f"{pending.pk} demo.noop (PENDING)" in skipped
    assert f"{succeeded.pk} demo.noop (SUCCEEDED)" in skipped
    assert 'value="Yes, replay 2 job(s)"' in page
    assert {j.pk: snapshot(j) for j in [*dead, pending, succeeded]} == before
    assert not LogEntry.objects.exists()


def test_confirmed_replay_sends_only_dead_jobs_back_to_pending_with_same_id_history_and_effect_key(
    operator_client: Client,
    operator: User,
) -> None:
    dead = [job_in(JobStatus.DEAD), job_in(JobStatus.DEAD, kind="test.flaky", max_attempts=5, attempts=2)]
    pending, succeeded = job_in(JobStatus.PENDING), job_in(JobStatus.SUCCEEDED)
    histories = {j.pk: history(j) for j in dead}
    effect_keys = {j.pk: j.effect_key for j in dead}
    untouched = {j.pk: snapshot(j) for j in (pending, succeeded)}

    response = confirm(operator_client, run_action(operator_client, "replay_selected", [*dead, pending, succeeded]))

    assert response.redirect_chain[-1][0].startswith(LIST)
    assert messages_of(response) == ["Replayed 2 job(s).", "Skipped 2 job(s) that are not DEAD."]
    for before in dead:
        job = Job.objects.get(pk=before.pk)  # same id
        assert job.status == JobStatus.PENDING
        assert job.finished_at is None
        assert job.attempts == before.attempts  # attempt numbers keep counting
        assert job.max_attempts > job.attempts  # a fresh budget
        assert history(job) == histories[job.pk]
        assert job.effect_key == effect_keys[job.pk]
        (entry,) = audit_entries(job)
        assert entry.user_id == operator.pk
        assert entry.action_flag == CHANGE
        assert entry.object_repr == str(job)
        assert "Replayed" in entry.get_change_message()
    assert {j.pk: snapshot(j) for j in (pending, succeeded)} == untouched
    assert audit_entries(pending) == [] and audit_entries(succeeded) == []


def test_a_replayed_jobs_attempts_are_counted_for_its_new_run(operator_client: Client) -> None:
    # Issue 50: after a replay a 3 / 3 job showed 4 / 8 attempts, as if the old run's counted.
    from django.db.models import F

    dead = job_in(JobStatus.DEAD)
    assert (dead.attempts, dead.max_attempts) == (3, 3)
    services.replay(dead.pk)
    Job.objects.filter(pk=dead.pk).update(attempts=F("attempts") + 1)  # the new run's first attempt
    budget = Job.objects.get(pk=dead.pk).max_attempts - 3

    [row] = [r for r in job_rows(operator_client.get(LIST)) if text(r["short_id"]) == str(dead.pk)[-8:]]
    assert text(row["attempts_display"]) == f"1 / {budget} since its replay (4 in all)"


def test_replay_confirmed_after_someone_else_replayed_the_job_skips_it(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)
    confirmation = run_action(operator_client, "replay_selected", [job])
    services.replay(job.pk)  # another operator, between the confirmation page and "Yes"
    replayed_once = snapshot(job)

    response = confirm(operator_client, confirmation)

    assert messages_of(response) == ["Skipped 1 job(s) that are not DEAD."]
    assert snapshot(job) == replayed_once
    assert audit_entries(job) == []


def test_replay_button_is_on_a_dead_jobs_page_for_the_operator(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)

    page = body(operator_client.get(page_url(job)))

    assert re.search(rf'<a href="{replay_url(job)}"[^>]*id="replay-job"[^>]*>Replay</a>', page), page


def test_replay_button_asks_first_and_changes_nothing_until_confirmed(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD, last_error="ValueError: card declined")
    before = snapshot(job)

    asked = operator_client.get(replay_url(job))  # what the job page's button opens
    posted = operator_client.post(replay_url(job))  # a POST without confirm=yes asks too

    for response in (asked, posted):
        assert response.status_code == 200
        page = body(response)
        assert f"Replay job {str(job.pk)[-8:]}?" in page
        what = text(section(page, 'id="confirm-what"', "</p>"))
        assert str(job.pk) in what and "DEAD" in what and "ValueError: card declined" in what
        assert 'name="confirm" value="yes"' in page and 'name="csrfmiddlewaretoken"' in page
        assert f'href="{page_url(job)}" class="button cancel-link"' in page
    assert snapshot(job) == before
    assert audit_entries(job) == []


def test_confirmed_replay_button_replays_the_job_audits_it_and_says_so(operator_client: Client, operator: User) -> None:
    job = job_in(JobStatus.DEAD)
    attempts_before = history(job)

    response = operator_client.post(replay_url(job), {"confirm": "yes"}, follow=True)

    assert response.redirect_chain == [(page_url(job), 302)]
    assert messages_of(response) == [f"Job {job.pk} replayed: it is PENDING again."]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert history(job) == attempts_before
    (entry,) = audit_entries(job)
    assert (entry.user_id, entry.action_flag) == (operator.pk, CHANGE)
    assert 'id="replay-job"' not in body(response)  # PENDING now: no button


def test_replay_button_is_not_shown_to_a_viewer_nor_on_a_job_that_is_not_dead(
    operator_client: Client,
    viewer_client: Client,
) -> None:
    dead = job_in(JobStatus.DEAD)

    assert 'id="replay-job"' not in body(viewer_client.get(page_url(dead)))
    for status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.CANCELLED):
        page = body(operator_client.get(page_url(job_in(status))))
        assert 'id="replay-job"' not in page, status


def test_replay_url_refuses_other_methods(operator_client: Client) -> None:
    job = job_in(JobStatus.DEAD)

    assert operator_client.put(replay_url(job), {"confirm": "yes"}).status_code == 405
    assert operator_client.delete(replay_url(job)).status_code == 405
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD


def test_replay_url_on_a_job_that_is_not_dead_reports_an_error_and_changes_nothing(operator_client: Client) -> None:
    job = job_in(JobStatus.SUCCEEDED)
    before = snapshot(job)

    response = operator_client.post(replay_url(job), {"confirm": "yes"}, follow=True)

    assert messages_of(response) == [f"Job {job.pk} is SUCCEEDED; this needs a DEAD job."]
    assert snapshot(job) == before
    assert audit_entries(job) == []


# -- without the permission -------------------------------------------------------------------


@pytest.fixture(params=["viewer", "canceller"])
def non_replayer(request: pytest.FixtureRequest, db: None) -> Client:
    """Staff without reliableq.replay_job: one with no action at all, one with the cancel action."""
    perms = [("reliableq", "view_job")] + ([("reliableq", "cancel_job")] if request.param == "canceller" else [])
    return client_for(make_staff(request.param, *perms))


@pytest.fixture(params=["viewer", "replayer"])
def non_canceller(request: pytest.FixtureRequest, db: None) -> Client:
    """Staff without reliableq.cancel_job: one with no action at all, one with the replay action."""
    perms = [("reliableq", "view_job")] + ([("reliableq", "replay_job")] if request.param == "replayer" else [])
    return client_for(make_staff(request.param, *perms))


def test_staff_without_replay_permission_is_not_offered_the_replay_action(non_replayer: Client) -> None:
    job_in(JobStatus.DEAD)

    response = non_replayer.get(LIST)

    assert response.status_code == 200
    assert "replay_selected" not in action_choices(response)
    assert "Replay selected dead jobs" not in body(response)


def test_forged_replay_posts_from_staff_without_replay_permission_change_nothing(non_replayer: Client) -> None:
    job = job_in(JobStatus.DEAD)
    before = snapshot(job)
    selected = [str(job.pk)]

    first = non_replayer.post(LIST, {"action": "replay_selected", "_selected_action": selected, "index": "0"})
    confirmed = non_replayer.post(LIST, {"action": "replay_selected", "_selected_action": selected, "confirm": "yes"})
    button = non_replayer.post(replay_url(job), {"confirm": "yes"})
    asked = non_replayer.get(replay_url(job))

    assert first.status_code in (200, 302, 403)
    assert "Replay 1 job(s)?" not in body(first)  # no confirmation page either
    assert confirmed.status_code in (200, 302, 403)
    assert button.status_code == 403
    assert asked.status_code == 403  # not even the confirmation page
    assert snapshot(job) == before
    assert audit_entries(job) == []


def test_cancel_confirmation_lists_the_pending_and_running_jobs_and_the_skipped_ones(operator_client: Client) -> None:
    pending = [job_in(JobStatus.PENDING), job_in(JobStatus.PENDING)]
    running = job_in(JobStatus.RUNNING)
    dead = job_in(JobStatus.DEAD)

    response = run_action(operator_client, "cancel_selected", [*pending, running, dead])

    page = body(response)
    assert "Cancel 3 job(s)?" in page
    assert set(re.findall(r"[0-9a-f-]{36}", section(page, 'id="eligible-jobs"', "</ul>"))) == {
        str(j.pk) for j in [*pending, running]
    }
    assert f"{dead.pk} test.always_fails (DEAD)" in text(section(page, 'id="skipped-jobs"', "</ul>"))
    assert all(Job.objects.get(pk=j.pk).status == JobStatus.PENDING for j in pending)
    assert Job.objects.get(pk=running.pk).cancel_requested_at is None


def test_confirmed_cancel_cancels_pending_jobs_asks_running_ones_to_stop_and_audits_each(
    operator_client: Client, operator: User
) -> None:
    pending = [job_in(JobStatus.PENDING), job_in(JobStatus.PENDING)]
    dead, running = job_in(JobStatus.DEAD), job_in(JobStatus.RUNNING)
    untouched = snapshot(dead)

    response = confirm(operator_client, run_action(operator_client, "cancel_selected", [*pending, dead, running]))

    assert messages_of(response) == [
        "Cancelled 2 job(s).",
        "Asked 1 running job(s) to stop: each ends CANCELLED when its handler stops.",
        "Skipped 1 job(s) that are not PENDING or WAITING or RUNNING.",
    ]
    for before in pending:
        job = Job.objects.get(pk=before.pk)
        assert job.status == JobStatus.CANCELLED
        assert job.finished_at is not None
        (entry,) = audit_entries(job)
        assert (entry.user_id, entry.action_flag) == (operator.pk, CHANGE)
        assert "Cancelled" in entry.get_change_message()
    asked = Job.objects.get(pk=running.pk)
    assert asked.status == JobStatus.RUNNING and asked.cancel_requested_at is not None
    assert [e.get_change_message() for e in audit_entries(running)] == [services.CANCEL_REQUESTED]
    assert snapshot(dead) == untouched and audit_entries(dead) == []


def test_staff_without_cancel_permission_is_not_offered_cancel_and_forged_posts_change_nothing(
    non_canceller: Client,
) -> None:
    job = job_in(JobStatus.PENDING)
    before = snapshot(job)
    selected = [str(job.pk)]

    assert "cancel_selected" not in action_choices(non_canceller.get(LIST))
    first = non_canceller.post(LIST, {"action": "cancel_selected", "_selected_action": selected, "index": "0"})
    confirmed = non_canceller.post(LIST, {"action": "cancel_selected", "_selected_action": selected, "confirm": "yes"})

    assert "Cancel 1 job(s)?" not in body(first)
    assert confirmed.status_code in (200, 302, 403)
    assert snapshot(job) == before
    assert audit_entries(job) == []
