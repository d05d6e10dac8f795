"""The workflow list and a workflow's page: its members as a graph coloured by status, cancel and
replay (through reliableq.workflows and reliableq.services, which decide what is allowed)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet, Subquery, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from .. import services
from ..errors import WrongStatus
from ..models import Job, JobStatus, Workflow, WorkflowStatus
from ..workflows import cancel_workflow
from . import times as admin_times
from . import workflow_page
from .common import ReadOnlyAdmin, status_badge
from .paging import CappedCountPaginator

# A search looks among this many of the newest workflows: a name has no index, so a substring
# search reads at most this many rows (through the created_at index), whatever the table holds.
SEARCH_SCAN = 100_000
SHORT_ID = re.compile(r"[0-9a-fA-F]{4,12}")


def label(workflow: Workflow) -> str:
    return workflow.name or str(workflow.pk)[-8:]


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    list_display = ["name_display", "short_id", "status_display", "members", "run", "created_short", "finished_short"]
    list_display_links = ["name_display", "short_id"]
    list_filter = ["status"]
    search_fields = ["name"]  # shows the box; get_search_results decides what matches
    search_help_text = (
        f"A workflow id, the 8 characters the list shows, or part of a name (among the newest {SEARCH_SCAN:,})."
    )
    ordering = ["-created_at"]
    list_per_page = 100
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = CappedCountPaginator
    actions = None
    change_form_template = "admin/reliableq/workflow/change_form.html"
    fieldsets = [
        (None, {"fields": ("id", "name", "status_display", "run", "members", "member_counts", "callbacks_fired")}),
        (
            "Details",
            {"fields": ("callbacks_set", "submitted_by", "cancel_requested", "created", "updated", "finished")},
        ),
    ]
    readonly_fields = [str(name) for _, options in fieldsets for name in options["fields"]]

    # -- permissions: a workflow is its jobs -------------------------------------------------

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("reliableq.view_job")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("reliableq.cancel_job")

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("reliableq.replay_job")

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        return lookup == "status__exact"  # the list's one filter; no other lookup from the URL

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Workflow], search_term: str
    ) -> tuple[QuerySet[Workflow], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            pass
        found = Q(name__icontains=term)
        if SHORT_ID.fullmatch(term):
            found |= Q(id_text__endswith=term.lower())
        newest = Workflow.objects.order_by("-created_at").values("pk")[:SEARCH_SCAN]
        matching = (
            Workflow.objects.filter(pk__in=Subquery(newest))
            .annotate(id_text=Cast("id", TextField()))
            .filter(found)
            .values("pk")
        )
        return queryset.filter(pk__in=Subquery(matching)), False

    # -- columns --------------------------------------------------------------------------

    @admin.display(description="name", ordering="name")
    def name_display(self, workflow: Workflow) -> str:
        return workflow.name or "(no name)"

    @admin.display(description="id", ordering="id")
    def short_id(self, workflow: Workflow) -> str:
        return str(workflow.pk)[-8:]  # its end, as the job list shows ids: the start is the time

    @admin.display(description="status", ordering="status")
    def status_display(self, workflow: Workflow) -> str:
        badge = status_badge(workflow.status)
        if workflow.status == WorkflowStatus.RUNNING and workflow.cancel_requested_at is not None:
            return format_html("{} cancel requested", badge)
        return badge

    @admin.display(description="created", ordering="created_at")
    def created_short(self, workflow: Workflow) -> str:
        return admin_times.short(workflow.created_at, timezone.now())

    @admin.display(description="finished", ordering="finished_at")
    def finished_short(self, workflow: Workflow) -> str:
        return admin_times.short(workflow.finished_at, timezone.now())

    # -- the page's fields ----------------------------------------------------------------

    @admin.display(description="members by status")
    def member_counts(self, workflow: Workflow) -> str:
        counts = workflow_page.member_counts(workflow.pk)
        if not counts:
            return "-"
        jobs = reverse("admin:reliableq_job_changelist")
        return format_html_join(
            " ",
            '<a href="{}?workflow={}&amp;status__exact={}" class="rq-count">{} {}</a>',
            ((jobs, workflow.pk, status, status_badge(status), n) for status, n in counts),
        )

    @admin.display(description="callbacks fired")
    def callbacks_fired(self, workflow: Workflow) -> str:
        fired = workflow_page.callback_jobs(workflow.pk)
        if not fired:
            return "none yet"
        return format_html_join(
            ", ",
            'run {} {}: <a href="{}" class="rq-callback">{} {}</a> {}',
            ((c.run, c.event, c.url, c.kind, str(c.id)[-8:], status_badge(c.status)) for c in fired),
        )

    @admin.display(description="callbacks")
    def callbacks_set(self, workflow: Workflow) -> str:
        events = workflow.callbacks if isinstance(workflow.callbacks, dict) else {}
        if not events:
            return "-"
        return ", ".join(f"on {event}: {spec.get('kind', '?')}" for event, spec in sorted(events.items()))

    @admin.display(description="cancel requested")
    def cancel_requested(self, workflow: Workflow) -> str:
        return admin_times.to_second(workflow.cancel_requested_at)

    @admin.display(description="created")
    def created(self, workflow: Workflow) -> str:
        return admin_times.to_second(workflow.created_at)

    @admin.display(description="updated")
    def updated(self, workflow: Workflow) -> str:
        return admin_times.to_second(workflow.updated_at)

    @admin.display(description="finished")
    def finished(self, workflow: Workflow) -> str:
        return admin_times.to_second(workflow.finished_at)

    # -- the page -------------------------------------------------------------------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        extra = {"is_nav_sidebar_enabled": False, **(extra_context or {})}  # the graph needs the width
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], add: bool = False, change: bool = False,
        form_url: str = "", obj: Workflow | None = None,
    ) -> HttpResponse:  # fmt: skip
        if obj is not None:
            context["page"] = workflow_page.members_page(obj.pk)
            context["can_cancel"] = (
                obj.status == WorkflowStatus.RUNNING
                and obj.cancel_requested_at is None
                and self.has_cancel_permission(request)
            )
            context["can_replay"] = self.has_replay_permission(request)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/cancel/", view(self.cancel_view), name="reliableq_workflow_cancel"),
            path("<path:object_id>/replay/<uuid:job_id>/", view(self.replay_view), name="reliableq_workflow_replay"),
            *super().get_urls(),
        ]

    # -- cancel and replay: a confirmation page, then the service --------------------------

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        workflow = self.get_object(request, object_id)
        if workflow is None:
            return HttpResponseRedirect(reverse("admin:reliableq_workflow_changelist"))
        counts = dict(workflow_page.member_counts(workflow.pk))
        what = format_html(
            "Workflow <strong>{}</strong> is {}, run {}, with {} member(s): {} waiting, {} pending, {} running.",
            label(workflow), workflow.status, workflow.run, workflow.members,
            counts.get(JobStatus.WAITING, 0), counts.get(JobStatus.PENDING, 0), counts.get(JobStatus.RUNNING, 0),
        )  # fmt: skip
        consequence = (
            "Cancelled, its waiting and pending members end CANCELLED and never run; its running members are "
            "asked to stop (job.cancel_requested). Once every member has finished the workflow ends CANCELLED "
            "and its failure and complete callbacks fire."
        )

        def act() -> str:
            done = cancel_workflow(workflow.pk, by=request.user)  # audited by the service
            if done.status == WorkflowStatus.RUNNING:
                return (
                    f"Workflow {label(done)} cancelled: its waiting and pending members will not run; "
                    "its running members were asked to stop, and it ends CANCELLED when they do."
                )
            return f"Workflow {label(done)} cancelled."

        return self._confirm_then(request, workflow, verb="Cancel", title=f"Cancel workflow {label(workflow)}?",
                                  button="Yes, cancel this workflow", what=what, consequence=consequence,
                                  act=act)  # fmt: skip

    def replay_view(self, request: HttpRequest, object_id: str, job_id: uuid.UUID) -> HttpResponse:
        if not self.has_replay_permission(request):
            raise PermissionDenied
        workflow = self.get_object(request, object_id)
        if workflow is None:
            return HttpResponseRedirect(reverse("admin:reliableq_workflow_changelist"))
        member = Job.objects.filter(pk=job_id, workflow_id=workflow.pk, member_name__isnull=False).first()
        if member is None:
            self.message_user(request, f"Job {job_id} is not a member of this workflow.", messages.ERROR)
            return HttpResponseRedirect(reverse("admin:reliableq_workflow_change", args=[workflow.pk]))
        what = format_html(
            "Member <strong>{}</strong> ({}, job {}) of workflow <strong>{}</strong> is {} after {} attempt(s){}.",
            member.member_name, member.kind, member.pk, label(workflow), member.status, member.attempts,
            format_html("; its last error: <code>{}</code>", member.last_error[:200]) if member.last_error else "",
        )  # fmt: skip
        consequence = (
            "Replayed, it goes back to PENDING with the same id and its attempt history, the members its end "
            "cancelled wait for it again, and the workflow starts a new run: its callbacks can fire again."
        )

        def act() -> str:
            services.replay(member.pk, by=request.user)  # audited by the service
            status, run = Workflow.objects.filter(pk=workflow.pk).values_list("status", "run").get()
            return f"Member {member.member_name} replayed: it is PENDING again; the workflow is {status} (run {run})."

        return self._confirm_then(request, workflow, verb="Replay", title=f"Replay member {member.member_name}?",
                                  button="Yes, replay this member", what=what, consequence=consequence,
                                  act=act)  # fmt: skip

    def _confirm_then(
        self,
        request: HttpRequest,
        workflow: Workflow,
        *,
        verb: str,
        title: str,
        button: str,
        what: str,
        consequence: str,
        act: Callable[[], str],
    ) -> HttpResponse:
        """A confirmation page (GET, or a POST without confirm=yes); on confirmation act() and its
        message, or the service's refusal (WrongStatus) as an error; then back to the workflow."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        back = reverse("admin:reliableq_workflow_change", args=[workflow.pk])
        if request.method != "POST" or request.POST.get("confirm") != "yes":
            return TemplateResponse(
                request,
                "admin/reliableq/workflow/confirm.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": Workflow._meta,
                    "title": title,
                    "verb": verb,
                    "workflow": workflow,
                    "workflow_label": label(workflow),
                    "button": button,
                    "what": what,
                    "consequence": consequence,
                    "back": back,
                },
            )
        try:
            done = act()
        except WrongStatus as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, done, messages.SUCCESS)
        return HttpResponseRedirect(back)
