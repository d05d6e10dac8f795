"""A job's page: what it recorded (steps, checkpoints, sleeps, waits) and what it waits for."""

from __future__ import annotations

import json
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from ..models import Job, JobStatus, Step
from . import times as admin_times

# A job's page lists at most this many of its steps (the first recorded) and says how many more there are.
MAX_STEPS_SHOWN = 200
# A value is shown up to this many characters of its JSON, folded: a step may hold MAX_PAYLOAD_BYTES.
MAX_VALUE_CHARS = 2000
HEAD = mark_safe("<tr><th>name</th><th>kind</th><th>attempt</th><th>at</th><th>size</th><th>value</th></tr>")


def waiting(job: Job) -> str:
    """The event a WAITING job waits for and until when; "-" for any other job."""
    if job.status != JobStatus.WAITING or not job.waiting_for:
        return "-"
    if job.run_at is None or job.run_at.year >= 9999:  # no timeout: run_at is 9999-12-31
        until = "with no timeout"
    else:
        when = admin_times.relative(job.run_at, timezone.now())
        until = f"until {admin_times.to_second(job.run_at)} ({when}), then wait_for raises WaitTimeout"
    return format_html("event <code>{}</code>, {}", job.waiting_for, until)


def table(job: Job) -> str:
    """Each recorded name: name, kind, the attempt that recorded it, when, its size; the value folded."""
    recorded = list(Step.objects.filter(job_id=job.pk).order_by("id")[: MAX_STEPS_SHOWN + 1])
    if not recorded:
        return "-"
    more = ""
    if len(recorded) > MAX_STEPS_SHOWN:
        recorded = recorded[:MAX_STEPS_SHOWN]
        total = Step.objects.filter(job_id=job.pk).count()
        more = format_html("<p>and {} more (the first {} shown).</p>", f"{total - MAX_STEPS_SHOWN:,}", MAX_STEPS_SHOWN)
    rows = format_html_join("", "{}", ((_row(step),) for step in recorded))
    return format_html('<table id="job-steps"><thead>{}</thead><tbody>{}</tbody></table>{}', HEAD, rows, more)


def _row(step: Step) -> str:
    text = json.dumps(step.value, indent=2, sort_keys=True)
    size = len(json.dumps(step.value, separators=(",", ":")))
    shown = text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "\n…"
    summary = _summary(step.value)
    return format_html(
        '<tr class="step-{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
        '<td><details><summary>{}</summary><pre style="margin:0">{}</pre></details></td></tr>',
        step.kind.lower(),
        step.name,
        step.kind,
        step.attempt,
        admin_times.to_millisecond(step.updated_at),
        f"{size:,} B",
        summary,
        shown,
    )


def _summary(value: Any) -> str:
    """A line that says what the value is without unfolding it."""
    if isinstance(value, dict):
        return f"object, {len(value)} key(s)"
    if isinstance(value, list):
        return f"list of {len(value)}"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"
