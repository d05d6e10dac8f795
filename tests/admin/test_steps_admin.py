"""A job's steps and waits in the admin: its page shows what it recorded and what it waits for, the list
filters waiting jobs by event, and "Replay from the start" forgets the steps (audited, replay_job only)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client

import reliableq
from reliableq import services
from reliableq.models import Job, JobStatus, Step
from reliableq.testing import run_due

from .conftest import client_for, make_staff
from .pages import action_choices, body, messages_of, section, text

LIST = "/admin/reliableq/job/"

pytestmark = pytest.mark.django_db


def page_url(job_id: uuid.UUID) -> str:
    return f"/admin/reliableq/job/{job_id}/change/"


def from_start_url(job_id: uuid.UUID) -> str:
    return f"/admin/reliableq/job/{job_id}/replay-from-start/"


def dead_after_two_steps(tmp_path: Path) -> uuid.UUID:
    """A job that recorded steps one and two, then died at three (its only attempt)."""
    job_id = reliableq.enqueue("steps.three", {"log": str(tmp_path / "log"), "fail_at": "three"}, max_attempts=1).id
    [dead] = run_due()
    assert dead.status == JobStatus.DEAD
    return job_id


def waiting_for(name: str, tmp_path: Path, timeout: float | None = None) -> uuid.UUID:
    payload = {"log": str(tmp_path / "log"), "event": name, **({"timeout": timeout} if timeout else {})}
    job_id = reliableq.enqueue("steps.waiter", payload).id
    [parked] = run_due()
    assert parked.status == JobStatus.WAITING
    return job_id


def listed(response) -> set[str]:
    """The short ids the job list shows."""
    return set(re.findall(r'<th class="field-short_id"><a [^>]*>([0-9a-f]{8})</a>', body(response)))


def test_a_jobs_page_lists_its_steps_with_kind_attempt_time_and_size_and_folds_each_value(
    operator_client: Client, tmp_path: Path
) -> None:
    job_id = dead_after_two_steps(tmp_path)
    Step.objects.filter(job_id=job_id, name="two").update(value={"note": "<script>alert(1)</script>"})

    page = body(operator_client.get(page_url(job_id)))

    steps = section(page, 'id="job-steps"', "</table>")
    rows = re.findall(r"<tr class=\"step-step\">(.*?)</tr>", steps, re.S)
    assert [text(r).split()[:3] for r in rows] == [["one", "STEP", "1"], ["two", "STEP", "1"]]
    assert "5 B" in text(rows[0]), 'the value\'s size as stored: "one"'
    assert rows[1].count("<details>") == 1 and "object, 1 key(s)" in text(rows[1])
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in rows[1]
    assert "field-waiting" not in page, "no row for what a job that does not wait waits for"


def test_a_job_with_nothing_recorded_has_no_steps_section(operator_client: Client) -> None:
    job = reliableq.enqueue("demo.noop", {})
    page = body(operator_client.get(page_url(job.id)))
    assert 'id="job-steps"' not in page and "Steps and checkpoints" not in page and "field-waiting" not in page


@pytest.mark.parametrize("timeout", [None, 3600])
def test_a_waiting_jobs_page_says_what_it_waits_for_and_until_when(
    operator_client: Client, tmp_path: Path, timeout: float | None
) -> None:
    job_id = waiting_for("invoice-7-signed", tmp_path, timeout)

    page = body(operator_client.get(page_url(job_id)))

    waiting = text(section(page, "field-waiting", "</div>"))
    assert "event invoice-7-signed" in waiting
    if timeout:
        assert "until 20" in waiting and "WaitTimeout" in waiting
    else:
        assert "with no timeout" in waiting
    assert "step-event" in page, "the wait is among the recorded names"


def test_the_list_filters_waiting_jobs_by_any_event_or_one_named_and_search_finds_them(
    operator_client: Client, tmp_path: Path
) -> None:
    paid = waiting_for("order-1-paid", tmp_path)
    shipped = waiting_for("order-1-shipped", tmp_path)
    reliableq.enqueue("demo.noop", {})

    every = operator_client.get(LIST, {"waiting_for": "*"})
    one = operator_client.get(LIST, {"waiting_for": "order-1-paid"})
    searched = operator_client.get(LIST, {"q": "order-1-shipped"})

    assert listed(every) == {str(paid)[-8:], str(shipped)[-8:]}
    assert listed(one) == {str(paid)[-8:]}
    assert listed(searched) == {str(shipped)[-8:]}
    assert "any event" in body(every), "the filter offers any event, and no list of names"


def test_replay_from_the_start_forgets_the_steps_and_is_audited(
    operator_client: Client, operator: User, tmp_path: Path
) -> None:
    job_id = dead_after_two_steps(tmp_path)
    page = body(operator_client.get(page_url(job_id)))
    assert re.search(rf'<a href="{from_start_url(job_id)}"[^>]*>Replay from the start</a>', page), page

    asked = operator_client.get(from_start_url(job_id))
    assert "every step runs again" in body(asked) and Step.objects.filter(job_id=job_id).count() == 2
    done = operator_client.post(from_start_url(job_id), {"confirm": "yes"}, follow=True)

    assert messages_of(done) == [f"Job {job_id} replayed from the start: its steps forgotten, it is PENDING again."]
    assert Job.objects.get(pk=job_id).status == JobStatus.PENDING
    assert not Step.objects.filter(job_id=job_id).exists()
    [entry] = LogEntry.objects.filter(object_id=str(job_id))
    assert entry.user_id == operator.pk and entry.get_change_message() == services.REPLAYED_FROM_THE_START


def test_the_list_action_replays_from_the_start_and_plain_replay_keeps_the_steps(
    operator_client: Client, tmp_path: Path
) -> None:
    again, kept = dead_after_two_steps(tmp_path), dead_after_two_steps(tmp_path)

    asked = operator_client.post(
        LIST, {"action": "replay_from_start_selected", "_selected_action": [str(again)], "index": "0"}
    )
    assert "forgets its recorded steps" in body(asked) and Job.objects.get(pk=again).status == JobStatus.DEAD
    done = operator_client.post(
        LIST, {"action": "replay_from_start_selected", "_selected_action": [str(again)], "confirm": "yes"}, follow=True
    )
    operator_client.post(LIST, {"action": "replay_selected", "_selected_action": [str(kept)], "confirm": "yes"})

    assert messages_of(done) == ["Replayed 1 job(s) from the start."]
    assert not Step.objects.filter(job_id=again).exists()
    assert Step.objects.filter(job_id=kept).count() == 2 and Job.objects.get(pk=kept).status == JobStatus.PENDING


@pytest.mark.parametrize(
    "perms", [[("reliableq", "view_job")], [("reliableq", "view_job"), ("reliableq", "cancel_job")]]
)
def test_staff_without_replay_job_cannot_replay_from_the_start(perms, tmp_path: Path) -> None:
    job_id = dead_after_two_steps(tmp_path)
    client = client_for(make_staff("stranger", *perms))

    page = body(client.get(page_url(job_id)))
    offered = action_choices(client.get(LIST))
    button = client.post(from_start_url(job_id), {"confirm": "yes"})
    asked = client.get(from_start_url(job_id))
    forged = client.post(
        LIST, {"action": "replay_from_start_selected", "_selected_action": [str(job_id)], "confirm": "yes"}
    )

    assert "replay-job-from-start" not in page and "replay_from_start_selected" not in offered
    assert button.status_code == 403 and asked.status_code == 403 and forged.status_code in (200, 302)
    assert Job.objects.get(pk=job_id).status == JobStatus.DEAD and Step.objects.filter(job_id=job_id).count() == 2
    assert not LogEntry.objects.exists()


def test_a_job_waiting_for_an_event_can_be_cancelled_from_its_page_and_the_event_then_wakes_nothing(
    operator_client: Client, tmp_path: Path
) -> None:
    job_id = waiting_for("order-5-paid", tmp_path)
    cancel_url = f"/admin/reliableq/job/{job_id}/cancel/"
    assert f'href="{cancel_url}"' in body(operator_client.get(page_url(job_id)))

    done = operator_client.post(cancel_url, {"confirm": "yes"}, follow=True)

    assert messages_of(done) == [f"Job {job_id} cancelled: no worker will run it."]
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED
    assert reliableq.emit("order-5-paid").woken == 0
    assert Job.objects.get(pk=job_id).status == JobStatus.CANCELLED
