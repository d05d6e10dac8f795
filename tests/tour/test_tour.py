"""The operator's tour, as a newcomer takes it: `manage.py demo --serve`, then the admin in a real browser.

The tour runs as a subprocess on the test database (DATABASE_URL), exactly as a person starts it:
the kill -9 proof, then gunicorn, a worker, DEAD jobs made by that worker and an operator account
whose password it prints. Chromium (Playwright) logs in with what it printed, checks that the
admin is styled, replays a DEAD job from its page, and looks at the dashboard's charts; the
screenshots of both themes go to artifacts/. Ctrl-C (SIGINT) must then stop everything.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User

import reliableq
from reliableq.models import Attempt, Job, JobStatus, Outcome
from testproject import processes
from tests.admin.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, load_playwright
from tests.admin.conftest import job_in
from tests.support import ROOT, wait_until, worker_env

pytestmark = pytest.mark.slow

DEAD_LINE = re.compile(r"^\s+(\S+)\s+(\d+) attempt\(s\)\s+http://[^/]+/admin/reliableq/job/([0-9a-f-]{36})/change/$")
HEADER_BG = "rgb(65, 118, 144)"  # the admin's --header-bg (#417690): base.css is applied
QUIET_FG = {"light": "rgb(102, 102, 102)", "dark": "rgb(208, 208, 208)"}  # --body-quiet-color in each theme


@dataclass
class Tour:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "\n".join(self.lines)

    def printed(self, label: str) -> str:
        """The value the tour printed after `label:` (its first such line)."""
        for line in self.lines:
            match = re.match(rf"^\s+{re.escape(label)}:\s+(\S+)$", line)
            if match:
                return match.group(1)
        raise AssertionError(f"the tour printed no {label!r}:\n{self.output()}")

    def dead_jobs(self) -> list[tuple[str, int, str]]:
        """(kind, attempts, id) of each DEAD job the tour listed."""
        return [(m.group(1), int(m.group(2)), m.group(3)) for m in map(DEAD_LINE.match, self.lines) if m]


def answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def playwright_api() -> Any:
    return load_playwright()


@pytest.fixture
def leftovers(db_url: str) -> tuple[list[Job], list[Job]]:
    """What an earlier run leaves in .pgdata (the demo run twice): DEAD jobs and a backlog on 'emails'."""
    dead = [job_in(JobStatus.DEAD, kind="test.always_fails") for _ in range(2)]
    waiting = [reliableq.enqueue("demo.noop", {"newsletter": "earlier"}, queue="emails") for _ in range(3)]
    return dead, waiting


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def tour(db_url: str, leftovers: tuple[list[Job], list[Job]]) -> Iterator[Tour]:
    """`manage.py demo --serve` on the test database, started as a person would, up to its "password:" line."""
    port = processes.free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "demo", "--serve", "--port", str(port)],
        cwd=ROOT,
        env=worker_env(db_url, DJANGO_DEBUG="0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # As from a terminal: a suite run in the background (`cmd &`) ignores SIGINT, and a child
        # inherits that, so the Ctrl-C this test sends would never reach the tour.
        preexec_fn=_interruptible,
    )
    running = Tour(process=process)
    reader = threading.Thread(
        target=lambda: running.lines.extend(line.rstrip("\n") for line in process.stdout or ()), daemon=True
    )
    reader.start()
    try:
        wait_until(
            lambda: any("password:" in line for line in running.lines) or process.poll() is not None,
            timeout=180,
            interval=0.2,
            what="the tour's password line",
        )
        assert process.poll() is None, f"the tour exited with {process.returncode}:\n{running.output()}"
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def test_a_newcomer_logs_in_to_the_styled_admin_replays_a_dead_job_and_sees_the_charts(
    playwright_api: Any,
    leftovers: tuple[list[Job], list[Job]],
    tour: Tour,
) -> None:
    sync_playwright, expect = playwright_api.sync_playwright, playwright_api.expect
    url = tour.printed("dashboard").split("/admin/")[0]
    username, password = tour.printed("user"), tour.printed("password")
    assert username == "operator" and len(password) >= 12
    dead = tour.dead_jobs()
    assert sorted(kind for kind, _, _ in dead) == ["test.always_fails", "test.flaky", "test.flaky", "test.permanent"]
    flaky_id = next(job_id for kind, _, job_id in dead if kind == "test.flaky")
    operator = User.objects.get(username=username)
    assert operator.is_staff and not operator.is_superuser
    assert sorted(operator.get_all_permissions()) == [
        "charges.view_charge",
        "reliableq.cancel_job",
        "reliableq.pause_queue",
        "reliableq.replay_job",
        "reliableq.view_job",
    ]
    # This run's counts, whatever the database held before; and what the admin will list besides.
    earlier_dead, earlier_waiting = leftovers
    assert any(re.match(r"^10\. tour-worker ran them all: \d+ SUCCEEDED, 4 DEAD", line) for line in tour.lines)
    assert any(line.startswith("11. 25 jobs wait on queue 'emails'") for line in tour.lines), tour.output()
    assert any(
        f"{len(earlier_dead)} more DEAD job(s), {len(earlier_waiting)} more waiting on 'emails'" in line
        for line in tour.lines
    ), tour.output()
    assert Job.objects.filter(queue="emails", status=JobStatus.PENDING).count() >= 25 + len(earlier_waiting)
    ARTIFACTS.mkdir(exist_ok=True)

    # No ORM inside this block: Playwright's sync API runs an event loop in this thread.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = None
        try:
            context = browser.new_context(base_url=url, viewport={"width": 1920, "height": 1000})
            page = context.new_page()
            page.set_default_timeout(15_000)
            expect.set_options(timeout=15_000)

            def both_themes(name: str) -> None:
                for scheme in ("light", "dark"):
                    page.emulate_media(color_scheme=scheme)
                    page.screenshot(path=ARTIFACTS / f"tour-{name}-{scheme}.png", full_page=True)
                page.emulate_media(color_scheme="light")

            # The admin is styled: the server itself answers for base.css, and its rules apply.
            with page.expect_response(re.compile(r"/static/admin/css/base\.css$")) as stylesheet:
                page.goto("/admin/login/?next=/admin/")
            assert stylesheet.value.status == 200, stylesheet.value.status
            assert page.locator("#header").evaluate("e => getComputedStyle(e).backgroundColor") == HEADER_BG
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.click('input[type="submit"]')
            expect(page.locator("#user-tools")).to_contain_text(username)
            toggle = page.locator("button.theme-toggle").bounding_box()
            assert toggle and toggle["width"] <= 40, toggle  # the unstyled page's icons were huge

            # Filter the job list to the DEAD jobs the tour's worker made.
            page.goto("/admin/reliableq/job/")
            page.locator('#changelist-filter details[data-filter-title="status"]').get_by_role(
                "link", name="Dead", exact=True
            ).click()
            expect(page).to_have_url(re.compile(r"status__exact=DEAD"))
            expect(page.locator("#result_list tbody tr")).to_have_count(len(dead) + len(earlier_dead))
            both_themes("job-list")

            # Open a DEAD test.flaky job, read its attempts, replay it.
            page.locator("#result_list").get_by_role("link", name=flaky_id[-8:], exact=True).click()
            expect(page.locator(".field-id .readonly")).to_have_text(flaky_id)
            attempts = page.locator("#attempt_set-group tbody tr.has_original")
            expect(attempts.locator("td.field-outcome_badge")).to_have_text(["FAILED_TRANSIENT"] * 3)
            expect(attempts.locator("td.field-error").first).to_contain_text("attempt 1 failed on purpose")
            expect(attempts.locator("td.field-worker_id").first).to_have_text("tour-worker")
            both_themes("dead-job")
            page.click("#replay-job")
            expect(page.locator("#confirm-what")).to_contain_text(flaky_id)  # a single Replay asks first
            page.click("#confirm-action")
            expect(page.locator("ul.messagelist")).to_contain_text("it is PENDING again")

            # The tour's worker runs it again; this time it succeeds (attempt 4 of test.flaky).
            deadline = time.monotonic() + 30
            while page.locator(".field-status_display .rq-status").inner_text() != "SUCCEEDED":
                assert time.monotonic() < deadline, "the replayed job did not succeed within 30 s"
                page.wait_for_timeout(300)
                page.reload()
            expect(attempts.locator("td.field-outcome_badge")).to_have_text(["FAILED_TRANSIENT"] * 3 + ["SUCCEEDED"])

            # The dashboard draws its three charts, in both themes.
            page.goto("/admin/reliableq/queuedashboard/")
            charts = page.locator("svg.rq-chart")
            expect(charts).to_have_count(3)
            for i in range(3):
                box = charts.nth(i).bounding_box()
                assert box and box["width"] > 300 and box["height"] > 50, box
            assert page.locator("#chart-finished svg rect.rq-succeeded").count() > 0
            assert page.locator("#chart-finished svg rect.rq-dead").count() > 0
            expect(page.locator("#chart-backlog svg polyline")).to_have_count(1)
            expect(page.locator("#chart-durations svg")).to_contain_text("test.flaky")
            label = page.locator("#chart-finished svg text.rq-axis-label").first
            fill = "e => getComputedStyle(e).fill"
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                assert label.evaluate(fill) == QUIET_FG[scheme], scheme
            page.emulate_media(color_scheme="light")
            page.evaluate("document.documentElement.dataset.theme = 'dark'")  # the theme toggle's way
            assert label.evaluate(fill) == QUIET_FG["dark"]
            page.evaluate("document.documentElement.dataset.theme = 'auto'")
            both_themes("dashboard")
        except Exception as exc:
            if page is not None:
                page.screenshot(path=ARTIFACTS / "tour-failure.png", full_page=True)
            raise AssertionError(f"{exc}\n--- the tour's output ---\n{tour.output()[-4000:]}") from exc
        finally:
            browser.close()

    replayed = Job.objects.get(pk=flaky_id)
    assert replayed.status == JobStatus.SUCCEEDED
    assert list(Attempt.objects.filter(job=replayed).order_by("number").values_list("outcome", flat=True)) == [
        Outcome.FAILED_TRANSIENT
    ] * 3 + [Outcome.SUCCEEDED]
    (entry,) = LogEntry.objects.filter(object_id=flaky_id)
    assert entry.user_id == operator.pk
    for name in ("job-list", "dead-job", "dashboard"):
        for scheme in ("light", "dark"):
            assert (ARTIFACTS / f"tour-{name}-{scheme}.png").stat().st_size > 10_000, (name, scheme)

    # Ctrl-C stops the server and the worker, and the tour exits cleanly.
    children = psutil.Process(tour.process.pid).children(recursive=True)  # gunicorn and its workers, the worker
    port = int(url.rsplit(":", 1)[1])
    assert children and answers(port)
    tour.process.send_signal(signal.SIGINT)
    assert tour.process.wait(timeout=60) == 0, tour.output()
    wait_until(lambda: "all processes stopped" in tour.output(), timeout=10, what="the tour's last line")
    _, left = psutil.wait_procs(children, timeout=10)
    assert not left, f"still running after Ctrl-C: {left}"
    assert not answers(port)
    assert "Ctrl-C: stopping everything the demo started" in tour.output()
