"""What the admin pages share: status badges, effect links, progress bars, the NUL guard, the
read-only base."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.contrib import admin
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html

from .. import registry
from ..models import Job, JobStatus, WorkflowStatus

STATUS_COLOURS: dict[str, str] = {
    JobStatus.WAITING: "#6a1b9a",
    JobStatus.PENDING: "#205493",
    JobStatus.RUNNING: "#b35900",
    JobStatus.SUCCEEDED: "#2e7d32",
    JobStatus.DEAD: "#b71c1c",
    JobStatus.CANCELLED: "#616161",
    WorkflowStatus.FAILED: "#b71c1c",  # a workflow's: it ended with a member DEAD or CANCELLED
}


def status_badge(status: str) -> str:
    return format_html(
        '<span class="rq-status rq-{}" style="color:#fff;background:{};padding:1px 6px;border-radius:3px;'
        'font-weight:bold;font-size:11px">{}</span>',
        status.lower(),
        STATUS_COLOURS.get(status, "#000"),
        status,
    )


# Apps that keep a record of a kind's effect (the bundled charges app, say) register a link to it
# here, shown on the job's page: register_effect_link("charge", lambda job: format_html(...)).
EFFECT_LINKS: dict[str, Callable[[Job], str]] = {}


def register_effect_link(kind: str, link: Callable[[Job], str]) -> None:
    """Show link(job) (safe HTML) on the page of every job of `kind`."""
    EFFECT_LINKS[kind] = link


# The most jobs one Replay or Cancel action touches: the confirmation page lists each of them.
MAX_SELECTION = 500


def progress_html(progress: Any) -> str:
    """A job's last progress report as a bar (with a total) or a count, its note, and when it came."""
    if not isinstance(progress, dict) or "done" not in progress:
        return "-"
    done, total, note = progress.get("done"), progress.get("total"), progress.get("note") or ""
    at = str(progress.get("at", ""))[11:19]
    if isinstance(total, int | float) and total > 0 and isinstance(done, int | float):
        share = max(0.0, min(1.0, done / total))
        return format_html(
            '<progress class="job-progress" value="{}" max="1" title="{}"></progress> {} of {} {} <small>{}</small>',
            f"{share:.3f}", f"{share:.0%}", done, total, note, at,
        )  # fmt: skip
    return format_html("{} {} <small>{}</small>", done, note, at)


def registry_keeps_result(kind: str) -> bool:
    try:
        return registry.get(kind).keep_return
    except registry.UnknownKind:
        return True  # a kind this process does not know: show what is stored


class RefusesNul:
    """A list whose query string holds NUL is a 400: PostgreSQL cannot compare text with it (a 500 otherwise)."""

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if any("\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()):
            raise BadRequest("The query string cannot contain NUL characters.")
        return cast(HttpResponse, super().changelist_view(request, extra_context))  # type: ignore[misc]


class ReadOnlyAdmin(RefusesNul, admin.ModelAdmin):  # type: ignore[type-arg]  # one base for several models
    """A list and pages to read, nothing to add, change or delete: jobs change only through the
    services (replay, cancel), workers and charges only through their own code."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
