"""An operator replays a DEAD job, and a workflow's DEAD member, and makes a schedule that a running
worker serves, in a real browser (Debian's chromium, driven by Playwright).

The admin is served by a real gunicorn (testproject.processes.start_api) on the test database,
and its CSS and JavaScript by that same server (WhiteNoise, after collectstatic, as a deployment
does), so the screenshots show the real admin and its actions script runs.

Without chromium or playwright the test is skipped, except under CI (CI set), where it fails
(tests/admin/browser.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.core.management import call_command

import reliableq
from reliableq.models import Attempt, Job, JobStatus, Schedule, Workflow, WorkflowStatus
from reliableq.testing import drain
from testproject import processes
from tests.support import queue_database_env

from .browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, load_playwright
from .conftest import OPERATOR_PERMS, PASSWORD, job_in, make_staff

pytestmark = pytest.mark.slow


@pytest.fixture
def playwright_api() -> Any:
    return load_playwright()


@pytest.fixture
def live_admin(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """gunicorn serving testproject (its /admin/ and the admin's static files) on a free port, on the test database."""
    call_command("collectstatic", interactive=False, verbosity=0)  # what a deployment does before it starts
    port = processes.free_port()
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("wb") as log:
        env = processes.child_env(DATABASE_URL=db_url, DJANGO_DEBUG="0", **queue_database_env())
        server = processes.start_api(port, env=env, log=log, workers=1, threads=4)
    url = f"http://127.0.0.1:{port}"
    try:
        processes.wait_http(f"{url}/admin/login/", timeout=30, process=server)
        yield url, log_path
    finally:
        processes.stop(server)


def test_operator_replays_a_dead_job_from_the_admin_in_a_browser(
    playwright_api: Any,
    live_admin: tuple[str, Path],
) -> None:
    url, server_log = live_admin
    sync_playwright, expect = playwright_api.sync_playwright, playwright_api.expect
    operator = make_staff("operator", *OPERATOR_PERMS, password=PASSWORD)
    dead = job_in(JobStatus.DEAD, kind="test.always_fails", payload={"order": 42, "note": "card declined"})
    other_dead = job_in(
        JobStatus.DEAD, kind="test.permanent", attempts=1, last_error="PermanentError: the input can never be valid"
    )
    job_in(JobStatus.PENDING, kind="demo.noop")
    job_in(JobStatus.SUCCEEDED, kind="test.flaky")
    history = list(Attempt.objects.filter(job=dead).order_by("number").values_list("id", "outcome"))
    short = str(dead.pk)[-8:]
    ARTIFACTS.mkdir(exist_ok=True)

    # No ORM inside this block: Playwright's sync API runs an event loop in this thread.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = None
        try:
            context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.set_default_timeout(15_000)
            expect.set_options(timeout=15_000)

            page.goto("/admin/login/?next=/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click('input[type="submit"]')
            expect(page.locator("#user-tools")).to_contain_text("operator")

            page.goto("/admin/reliableq/job/")
            expect(page.locator("#result_list tbody tr")).to_have_count(4)
            # At 1,280 px the last error is on screen: no horizontal scroll, of the page or of the table.
            other_row = page.locator("#result_list tbody tr").filter(
                has=page.get_by_role("link", name=str(other_dead.pk)[-8:], exact=True)
            )
            error_cell = other_row.locator("td.field-short_error")
            expect(error_cell).to_contain_text("PermanentError: the input can never be valid")
            box = error_cell.bounding_box()
            assert box is not None and box["x"] + box["width"] <= 1280, box
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            assert page.evaluate(
                "[...document.querySelectorAll('#changelist .results')].every(e => e.scrollWidth <= e.clientWidth)"
            )
            page.screenshot(path=ARTIFACTS / "admin-job-list-1280.png")  # the viewport: what shows unscrolled

            # A single Replay asks first; "No" leaves the job DEAD.
            other_row.get_by_role("link", name=str(other_dead.pk)[-8:], exact=True).click()
            page.click("#replay-job")
            expect(page.locator("h1")).to_have_text(f"Replay job {str(other_dead.pk)[-8:]}?")
            expect(page.locator("#confirm-what")).to_contain_text("PermanentError: the input can never be valid")
            page.screenshot(path=ARTIFACTS / "admin-replay-confirmation.png")
            page.get_by_role("link", name="No, take me back").click()
            expect(page.locator(".field-id .readonly")).to_have_text(str(other_dead.pk))
            page.goto("/admin/reliableq/job/")
            status_filter = page.locator('#changelist-filter details[data-filter-title="status"]')
            status_filter.get_by_role("link", name="Dead", exact=True).click()
            expect(page).to_have_url(re.compile(r"status__exact=DEAD"))
            expect(page.locator("#result_list tbody tr")).to_have_count(2)
            expect(page.locator("#result_list .rq-status")).to_have_text(["DEAD", "DEAD"])

            page.locator("#result_list").get_by_role("link", name=short, exact=True).click()
            expect(page.locator("h1")).to_have_text("View job")
            expect(page.locator(".field-id .readonly")).to_have_text(str(dead.pk))
            attempts = page.locator("#attempt_set-group tbody tr.has_original")
            expect(attempts).to_have_count(3)
            expect(attempts.locator("td.field-number")).to_have_text(["1", "2", "3"])
            expect(attempts.locator("td.field-outcome_badge")).to_have_text(
                ["FAILED_TRANSIENT", "FAILED_TRANSIENT", "FAILED_PERMANENT"]
            )
            expect(attempts.locator("td.field-error").first).to_have_text("attempt 1 failed: boom")
            expect(page.locator(".field-payload_pretty pre")).to_contain_text('"order": 42')
            expect(page.locator("#replay-job")).to_be_visible()
            # The attempt history is on screen at once, above the payload and the lease details.
            history_box = page.locator("#attempt_set-group").bounding_box()
            assert history_box is not None and history_box["y"] < 900, history_box
            page.screenshot(path=ARTIFACTS / "admin-dead-job-page.png", full_page=True)

            page.go_back()
            expect(page).to_have_url(re.compile(r"status__exact=DEAD"))
            page.locator(f'#result_list input.action-select[value="{dead.pk}"]').check()
            page.select_option('select[name="action"]', label="Replay selected dead jobs")
            page.click('button[name="index"]')  # "Go"

            expect(page.locator("h1")).to_have_text("Replay 1 job(s)?")
            expect(page.locator("#eligible-jobs")).to_contain_text(str(dead.pk))
            page.click("#confirm-action")

            expect(page.locator("ul.messagelist")).to_contain_text("Replayed 1 job(s).")
            expect(page.locator("#result_list").get_by_role("link", name=short, exact=True)).to_have_count(0)
            page.screenshot(path=ARTIFACTS / "admin-replayed-message.png", full_page=True)

            page.locator('#changelist-filter details[data-filter-title="status"]').get_by_role(
                "link", name="All", exact=True
            ).click()
            row = page.locator("#result_list tbody tr").filter(has=page.get_by_role("link", name=short, exact=True))
            expect(row.locator(".rq-status")).to_have_text("PENDING")
            # The replayed run starts afresh; its three earlier attempts are still counted beside it.
            expect(row.locator("td.field-attempts_display")).to_have_text(
                re.compile(r"^0 / \d+ since its replay \(3 in all\)$")
            )
            page.screenshot(path=ARTIFACTS / "admin-job-list-after-replay.png", full_page=True)

            page.goto("/admin/")
            page.get_by_role("link", name="Queue dashboard").first.click()
            expect(page.locator("#dead-count")).to_have_text("1")
            expect(page.locator("#by-status")).to_contain_text("PENDING")
            page.screenshot(path=ARTIFACTS / "admin-queue-dashboard.png", full_page=True)
        except Exception as exc:
            if page is not None:
                page.screenshot(path=ARTIFACTS / "admin-browser-failure.png", full_page=True)
            raise AssertionError(
                f"{exc}\n--- gunicorn log ---\n{server_log.read_text(errors='replace')[-3000:]}"
            ) from exc
        finally:
            browser.close()

    dead.refresh_from_db()
    assert dead.status == JobStatus.PENDING
    assert list(Attempt.objects.filter(job=dead).order_by("number").values_list("id", "outcome")) == history
    assert Job.objects.get(pk=other_dead.pk).status == JobStatus.DEAD
    (entry,) = LogEntry.objects.filter(object_id=str(dead.pk))
    assert entry.user_id == operator.pk
    for name in ("admin-dead-job-page.png", "admin-job-list-after-replay.png", "admin-job-list-1280.png"):
        assert (ARTIFACTS / name).stat().st_size > 10_000, name


def test_operator_walks_a_workflow_graph_and_replays_its_dead_member_in_a_browser(
    playwright_api: Any,
    live_admin: tuple[str, Path],
) -> None:
    url, server_log = live_admin
    sync_playwright, expect = playwright_api.sync_playwright, playwright_api.expect
    operator = make_staff("operator", *OPERATOR_PERMS, password=PASSWORD)
    wf = reliableq.workflow(name="nightly import")
    fetch = wf.add("wf.step", {}, name="fetch")
    loads = [wf.add("wf.step", {"fail": n == 1}, name=f"load-{n}", after=[fetch]) for n in range(3)]
    wf.add("wf.step", {}, name="report", after=loads)
    wf.on("failure", "wf.callback", {})
    record = wf.enqueue()
    drain()
    dead = Job.objects.get(workflow=record, member_name="load-1")
    assert dead.status == JobStatus.DEAD
    ARTIFACTS.mkdir(exist_ok=True)

    # No ORM inside this block: Playwright's sync API runs an event loop in this thread.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = None
        try:
            context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.set_default_timeout(15_000)
            expect.set_options(timeout=15_000)

            page.goto("/admin/login/?next=/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click('input[type="submit"]')
            expect(page.locator("#user-tools")).to_contain_text("operator")

            page.goto("/admin/reliableq/workflow/")
            row = page.locator("#result_list tbody tr")
            expect(row).to_have_count(1)
            expect(row.locator(".rq-status")).to_have_text("FAILED")
            expect(row.locator("td.field-members")).to_have_text("5")
            page.screenshot(path=ARTIFACTS / "admin-workflow-list.png")
            row.get_by_role("link", name="nightly import", exact=True).click()

            expect(page.locator("h1")).to_have_text("View workflow")
            graph = page.locator("#workflow-graph")
            expect(graph).to_be_visible()
            expect(graph.locator("a.rq-node")).to_have_count(5)
            expect(graph.locator('a.rq-node[data-status="DEAD"]')).to_have_count(1)
            node = graph.locator('a.rq-node[data-member="load-1"]')
            assert node.locator("title").text_content() == "load-1: DEAD"  # its accessible name
            expect(node.locator("rect")).to_have_attribute("fill", "#b71c1c")
            expect(graph.locator('a.rq-node[data-member="report"]')).to_have_attribute("data-status", "CANCELLED")
            expect(page.locator("#workflow-members tbody tr")).to_have_count(5)
            # The graph is on screen at 1,280 px, beside nothing that pushes it sideways.
            box = graph.bounding_box()
            assert box is not None and box["x"] + box["width"] <= 1280 and box["y"] < 900, box
            page.screenshot(path=ARTIFACTS / "admin-workflow-graph.png", full_page=True)

            node.click()  # a node is a link to its job
            expect(page.locator("h1")).to_have_text("View job")
            expect(page.locator(".field-id .readonly")).to_have_text(str(dead.pk))
            expect(page.locator("#job-workflow")).to_have_text("nightly import")
            expect(page.locator(".field-workflow_link .readonly")).to_contain_text("Member load-1 of workflow")

            page.go_back()
            expect(page.locator("#workflow-graph")).to_be_visible()
            page.locator('#workflow-members a.replay-member[data-member="load-1"]').click()
            expect(page.locator("h1")).to_have_text("Replay member load-1?")
            expect(page.locator("#confirm-what")).to_contain_text("the payload asked this member to fail")
            page.screenshot(path=ARTIFACTS / "admin-workflow-replay-confirmation.png")
            page.click("#confirm-action")

            expect(page.locator("ul.messagelist")).to_contain_text(
                "Member load-1 replayed: it is PENDING again; the workflow is RUNNING (run 2)."
            )
            expect(page.locator(".field-status_display .readonly")).to_contain_text("RUNNING")
            expect(page.locator(".field-run .readonly")).to_have_text("2")
            expect(page.locator('#workflow-graph a.rq-node[data-member="load-1"]')).to_have_attribute(
                "data-status", "PENDING"
            )
            expect(page.locator('#workflow-graph a.rq-node[data-member="report"]')).to_have_attribute(
                "data-status", "WAITING"
            )
            page.screenshot(path=ARTIFACTS / "admin-workflow-replayed.png", full_page=True)
        except Exception as exc:
            if page is not None:
                page.screenshot(path=ARTIFACTS / "admin-browser-workflow-failure.png", full_page=True)
            raise AssertionError(
                f"{exc}\n--- gunicorn log ---\n{server_log.read_text(errors='replace')[-3000:]}"
            ) from exc
        finally:
            browser.close()

    record = Workflow.objects.get(pk=record.pk)
    assert (record.status, record.run) == (WorkflowStatus.RUNNING, 2)
    assert Job.objects.get(pk=dead.pk).status == JobStatus.PENDING
    (entry,) = LogEntry.objects.filter(object_id=str(dead.pk))
    assert entry.user_id == operator.pk
    assert (ARTIFACTS / "admin-workflow-graph.png").stat().st_size > 10_000


def test_an_operators_schedule_made_in_the_admin_runs_with_no_restart(
    playwright_api: Any,
    live_admin: tuple[str, Path],
    spawn_worker: Any,
) -> None:
    url, server_log = live_admin
    sync_playwright, expect = playwright_api.sync_playwright, playwright_api.expect
    operator = make_staff("scheduler", ("reliableq", "change_schedule"), ("reliableq", "view_job"), password=PASSWORD)
    worker = spawn_worker()  # running before the schedule exists; never restarted
    worker.wait_for_output("is the maintenance leader", timeout=30)
    ARTIFACTS.mkdir(exist_ok=True)

    # No ORM inside this block: Playwright's sync API runs an event loop in this thread.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = None
        try:
            context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.set_default_timeout(15_000)
            expect.set_options(timeout=15_000)

            page.goto("/admin/login/?next=/admin/")
            page.fill("#id_username", "scheduler")
            page.fill("#id_password", PASSWORD)
            page.click('input[type="submit"]')
            expect(page.locator("#user-tools")).to_contain_text("scheduler")

            page.goto("/admin/reliableq/schedule/add/")
            page.fill("#id_name", "heartbeat")
            page.select_option("#id_kind", "demo.noop")
            page.fill("#id_cron", "every second")  # a mistake first: an error on its field, nothing saved
            page.fill("#id_timezone", "Europe/Paris")
            page.fill("#id_payload", '{"from": "the admin"}')
            page.click('input[name="_save"]')
            expect(page.locator(".field-cron .errorlist")).to_contain_text("Invalid cron expression")
            page.fill("#id_cron", "*/4 * * * * *")  # each slot's job made a second ahead, then run
            page.click('input[name="_save"]')
            expect(page.locator("ul.messagelist")).to_contain_text("was added successfully")

            row = page.locator("#result_list tbody tr").filter(has_text="heartbeat")
            expect(row.locator("td.field-cron_display")).to_have_text("*/4 * * * * *")
            expect(row.locator("td.field-timezone")).to_have_text("Europe/Paris")
            # The running worker's leader finds the new row at its next round: its jobs run.
            for _ in range(100):
                page.reload()
                if "SUCCEEDED" in (row.locator("td.field-last_slot_display").text_content() or ""):
                    break
                page.wait_for_timeout(300)
            expect(row.locator("td.field-last_slot_display .rq-status")).to_have_text("SUCCEEDED")
            page.screenshot(path=ARTIFACTS / "admin-schedule-list.png", full_page=True)

            row.locator("input.action-select").check()
            page.select_option('select[name="action"]', label="Disable selected schedules")
            page.click('button[name="index"]')
            expect(page.locator("ul.messagelist")).to_contain_text("Disabled 1 schedule(s).")
            expect(row.locator("td.field-next_slot_display")).to_have_text("disabled")
        except Exception as exc:
            if page is not None:
                page.screenshot(path=ARTIFACTS / "admin-browser-schedule-failure.png", full_page=True)
            raise AssertionError(
                f"{exc}\n--- gunicorn log ---\n{server_log.read_text(errors='replace')[-3000:]}"
                f"\n--- worker log ---\n{worker.output()[-3000:]}"
            ) from exc
        finally:
            browser.close()

    assert worker.proc.poll() is None, "the worker ran on, never restarted"
    made = Job.objects.filter(payload__schedule="heartbeat")
    assert made.filter(status=JobStatus.SUCCEEDED).exists()
    assert all(job.payload["from"] == "the admin" for job in made)
    schedule = Schedule.objects.get(name="heartbeat")
    assert not schedule.enabled and not schedule.from_code
    entries = LogEntry.objects.filter(object_id=str(schedule.pk), user_id=operator.pk)
    assert sorted(entries.values_list("action_flag", flat=True)) == [ADDITION, CHANGE]
