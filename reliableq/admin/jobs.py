"""The job list and a job's page: the attempt history, replay and cancel (through reliableq.services)."""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import F, Q, QuerySet, Subquery, TextField, Window
from django.db.models.functions import Cast, Lag, Now
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from .. import services
from ..errors import WrongStatus
from ..models import Attempt, Job, JobStatus, Step
from . import steps as admin_steps
from . import times as admin_times
from .common import EFFECT_LINKS, MAX_SELECTION, ReadOnlyAdmin, progress_html, registry_keeps_result, status_badge
from .filters import KindFilter, LeaseExpiredFilter, QueueFilter, WaitingForFilter, WorkflowFilter
from .paging import CappedCountPaginator
from .workflow_page import workflow_link as _workflow_link

# A short id (the list's 8 characters) is looked for among this many of the newest jobs: a suffix
# of a UUID has no index, so the search reads at most this many index entries, whatever the table holds.
SHORT_ID_SCAN = 100_000


SHORT_ID = re.compile(r"[0-9a-fA-F]{4,12}")
STEPS_TITLE = "Steps and checkpoints"


class AttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Attempt
    extra = 0
    can_delete = False
    ordering = ["number"]
    fields = (
        "number", "outcome_badge", "waited", "started", "finished", "duration", "worker_id", "error",
        "traceback_folded", "token",
    )  # fmt: skip
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Attempt]:
        # The previous attempt's end, beside each attempt: the backoff it waited, without a query per row.
        previous_end = Window(Lag("finished_at"), partition_by=[F("job_id")], order_by=F("number").asc())
        return cast("QuerySet[Attempt]", super().get_queryset(request).annotate(previous_finished_at=previous_end))

    @admin.display(description="lease token")
    def token(self, attempt: Attempt) -> str:
        # Its end, as the list shows a job's id; the whole token on hover.
        return format_html('<span title="{}">{}</span>', attempt.lease_token, str(attempt.lease_token)[-8:])

    @admin.display(description="retry after")
    def waited(self, attempt: Any) -> str:
        previous = getattr(attempt, "previous_finished_at", None)
        if previous is None or attempt.started_at is None:
            return "-"
        return admin_times.seconds(attempt.started_at - previous)

    @admin.display(description="started")
    def started(self, attempt: Attempt) -> str:
        return admin_times.to_millisecond(attempt.started_at)

    @admin.display(description="finished")
    def finished(self, attempt: Attempt) -> str:
        return admin_times.to_millisecond(attempt.finished_at)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The history is part of the job: whoever may view the job sees it (no separate view_attempt).
        return request.user.has_perm("reliableq.view_job")

    @admin.display(description="outcome")
    def outcome_badge(self, attempt: Attempt) -> str:
        colour = (
            "#2e7d32" if attempt.outcome == "SUCCEEDED" else "#b35900" if attempt.outcome == "RUNNING" else "#b71c1c"
        )
        return format_html('<strong style="color:{}">{}</strong>', colour, attempt.outcome)

    @admin.display(description="traceback")
    def traceback_folded(self, attempt: Attempt) -> str:
        if not attempt.traceback:
            return "-"
        last = attempt.traceback.rstrip().splitlines()[-1]
        return format_html(
            '<details class="attempt-traceback"><summary>{}</summary><pre style="margin:0">{}</pre></details>',
            last if len(last) <= 120 else last[:119] + "…",
            attempt.traceback,
        )

    @admin.display(description="duration")
    def duration(self, attempt: Attempt) -> str:
        if attempt.finished_at is None or attempt.started_at is None:
            return "running" if attempt.outcome == "RUNNING" else "-"
        return f"{(attempt.finished_at - attempt.started_at).total_seconds():.3f}s"


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    # What an operator reads first, left to right, within 1,280 px: the rest is on the job's page.
    list_display = [
        "short_id",
        "status_display",
        "kind",
        "queue",
        "attempts_display",
        "short_error",
        "next_run",
        "age",
    ]
    list_display_links = ["short_id"]
    list_filter = ["status", KindFilter, QueueFilter, LeaseExpiredFilter, WaitingForFilter, WorkflowFilter]
    search_fields = ["id", "dedupe_key", "kind"]
    search_help_text = (
        f"A job id, or the 8 characters the list shows (among the newest {SHORT_ID_SCAN:,} jobs); "
        "a dedupe key (Idempotency-Key), a kind, or the event a waiting job waits for, exactly."
    )
    ordering = ["-created_at"]
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # "Show counts" would COUNT the whole table once per filter
    paginator = CappedCountPaginator
    actions = ["replay_selected", "replay_from_start_selected", "cancel_selected"]
    inlines = [AttemptInline]
    change_form_template = "admin/reliableq/job/change_form.html"
    # The first fieldset, then the attempt history (change_form.html), then the rest.
    fieldsets = [
        (
            None,
            {
                "fields": (
                    "id",
                    "status_display",
                    "kind",
                    "queue",
                    "attempts_display",
                    "next_run_at",
                    "waiting",
                    "last_error",
                    "progress_bar",
                    "cancel_requested",
                )
            },
        ),
        (STEPS_TITLE, {"fields": ("steps_table",)}),
        (
            "Details",
            {
                "fields": (
                    "payload_pretty",
                    "result_pretty",
                    "effect_key",
                    "effect_link",
                    "priority",
                    "worker_id",
                    "lease_token",
                    "lease_expires",
                    "submitted_by",
                    "dedupe_key",
                    "unique_key",
                    "concurrency_key",
                    "fair_key",
                    "snoozes",
                    "created",
                    "updated",
                    "finished",
                )
            },
        ),
    ]
    # "workflow" joins the first fieldset on the page of a workflow's job only (get_fieldsets).
    readonly_fields = [str(name) for _, options in fieldsets for name in options["fields"]] + ["workflow_link"]

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        # Rows that say nothing for most jobs appear only on the pages of the jobs they concern, so the
        # attempt history stays where an operator looks for it: "workflow" for a workflow's job,
        # "waiting for" for a job waiting for an event, the steps for a job that recorded some.
        (title, options), *rest = self.fieldsets
        fields = list(options["fields"])
        if obj is not None and obj.workflow_id is not None:
            fields.insert(fields.index("status_display") + 1, "workflow_link")
        if obj is None or not obj.waiting_for:
            fields.remove("waiting")
        if obj is None or not Step.objects.filter(job_id=obj.pk).exists():
            rest = [fieldset for fieldset in rest if fieldset[0] != STEPS_TITLE]
        return [(title, {**options, "fields": tuple(fields)}), *rest]

    # -- read only ------------------------------------------------------------------------

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("reliableq.replay_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("reliableq.cancel_job")

    # The URL may filter only through the list's own filters: any other lookup (a payload key
    # with icontains, say) would be a full scan that anyone with view_job could start at will.
    ALLOWED_LOOKUPS = frozenset(
        {
            "status__exact",
            KindFilter.parameter_name,
            QueueFilter.parameter_name,
            LeaseExpiredFilter.parameter_name,
            WaitingForFilter.parameter_name,
            WorkflowFilter.parameter_name,
        }
    )

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        return lookup in self.ALLOWED_LOOKUPS

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # No page shows a whole payload but the job's own, which reads it itself (payload_pretty).
        # The database's now beside each row: whether a PENDING job is overdue is read by its clock.
        return cast("QuerySet[Job]", super().get_queryset(request).defer("payload").annotate(db_now=Now()))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # The list needs the width at 1,280 px: the app sidebar (300 px) is one click away on every other page.
        return super().changelist_view(request, {"is_nav_sidebar_enabled": False, **(extra_context or {})})

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Exact matches served by an index (id, dedupe key, kind), and the short id among the newest jobs."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            job_id = uuid.UUID(term)
        except ValueError:
            # A waiting job's event, through the partial index of waiting jobs.
            found = Q(dedupe_key=term) | Q(kind=term) | Q(status=JobStatus.WAITING, waiting_for=term)
            if SHORT_ID.fullmatch(term):
                newest = Job.objects.order_by("-created_at").values("pk")[:SHORT_ID_SCAN]
                ending = (
                    Job.objects.filter(pk__in=Subquery(newest))
                    .annotate(id_text=Cast("id", TextField()))
                    .filter(id_text__endswith=term.lower())
                    .values("pk")
                )
                found |= Q(pk__in=Subquery(ending))
            return queryset.filter(found), False
        # A UUID may be a job id or an Idempotency-Key (clients often use UUIDs for those).
        return queryset.filter(pk=job_id) | queryset.filter(dedupe_key=term), False

    # -- columns --------------------------------------------------------------------------

    @admin.display(description="id", ordering="id")
    def short_id(self, job: Job) -> str:
        # The id's end: its start is the time it was made (reliableq.ids), alike for a minute's jobs.
        return str(job.id)[-8:]

    @admin.display(description="status", ordering="status")
    def status_display(self, job: Job) -> str:
        badge = status_badge(job.status)
        if job.status == JobStatus.RUNNING and isinstance(job.progress, dict):  # the running list shows how far
            return format_html("{} {}", badge, progress_html(job.progress))
        return badge

    @admin.display(description="attempts")
    def attempts_display(self, job: Job) -> str:
        # This run's attempts and budget: attempt numbers go on counting across replays.
        base = job.replayed_at_attempt
        shown = f"{job.attempts - base} / {job.max_attempts - base}"
        return f"{shown} since its replay ({job.attempts} in all)" if base else shown

    @admin.display(description="age", ordering="created_at")
    def age(self, job: Job) -> str:
        return timesince(job.created_at, timezone.now()) if job.created_at else "-"

    @admin.display(description="last error")
    def short_error(self, job: Job) -> str:
        error = job.last_error or ""
        if len(error) <= 60:
            return error
        return format_html('<span title="{}">{}</span>', error[:300], error[:59] + "…")

    @admin.display(description="runs at", ordering="run_at")
    def next_run(self, job: Job) -> str:
        if job.status != JobStatus.PENDING:
            return "-"
        now = _now(job)
        shown = admin_times.short(job.run_at, now)
        if job.run_at < now:  # due and still waiting for a worker: a past time alone reads as done
            return format_html('{} <strong class="overdue" style="color:#b71c1c">overdue</strong>', shown)
        return shown

    @admin.display(description="runs at")
    def next_run_at(self, job: Job) -> str:
        if job.status != JobStatus.PENDING:
            return "-"
        now = _now(job)
        after = " (the next attempt, after a failure)" if job.attempts else ""
        overdue = ": overdue, due and not yet claimed" if job.run_at < now else ""
        return f"{admin_times.to_second(job.run_at)}, {admin_times.relative(job.run_at, now)}{overdue}{after}"

    @admin.display(description="waiting for")
    def waiting(self, job: Job) -> str:
        return admin_steps.waiting(job)

    @admin.display(description="recorded")
    def steps_table(self, job: Job) -> str:
        return admin_steps.table(job)

    @admin.display(description="lease expires")
    def lease_expires(self, job: Job) -> str:
        return admin_times.to_second(job.lease_expires_at)

    @admin.display(description="created")
    def created(self, job: Job) -> str:
        return admin_times.to_second(job.created_at)

    @admin.display(description="updated")
    def updated(self, job: Job) -> str:
        return admin_times.to_second(job.updated_at)

    @admin.display(description="finished")
    def finished(self, job: Job) -> str:
        return admin_times.to_second(job.finished_at)

    @admin.display(description="cancel requested")
    def cancel_requested(self, job: Job) -> str:
        if job.cancel_requested_at is None:
            return "-"
        return f"at {job.cancel_requested_at:%Y-%m-%d %H:%M:%S %Z}: the handler sees job.cancel_requested"

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> str:
        return progress_html(job.progress)

    @admin.display(description="result")
    def result_pretty(self, job: Job) -> str:
        if job.status != JobStatus.SUCCEEDED or not registry_keeps_result(job.kind):
            return "-"
        return format_html('<pre style="margin:0">{}</pre>', json.dumps(job.result, indent=2, sort_keys=True))

    @admin.display(description="effect key")
    def effect_key(self, job: Job) -> str:
        return job.effect_key

    @admin.display(description="payload")
    def payload_pretty(self, job: Job) -> str:
        # Read as text and decoded here, not by the ORM (the queryset defers it): a payload stored
        # before nesting was bounded (or written by hand) would stop the decoder with a RecursionError
        # deep in the admin's stack, and the whole page would fail. Such a payload is shown as stored.
        raw = Job.objects.filter(pk=job.pk).annotate(text=Cast("payload", TextField())).values_list("text", flat=True)
        text = next(iter(raw), "") or ""
        try:
            text = json.dumps(json.loads(text), indent=2, sort_keys=True)
        except (RecursionError, ValueError):
            pass
        return format_html('<pre style="margin:0">{}</pre>', text)

    @admin.display(description="workflow")
    def workflow_link(self, job: Job) -> str:
        return _workflow_link(job)

    @admin.display(description="effect")
    def effect_link(self, job: Job) -> str:
        link = EFFECT_LINKS.get(job.kind)
        return link(job) if link is not None else "-"

    # -- replay and cancel ----------------------------------------------------------------

    @admin.action(description="Replay selected dead jobs", permissions=["replay"])
    def replay_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._confirm_then(
            request,
            queryset,
            action="replay_selected",
            needed=JobStatus.DEAD,
            verb="Replay",
            act=services.replay,
        )

    @admin.action(description="Replay selected dead jobs from the start", permissions=["replay"])
    def replay_from_start_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        # As replay_selected, with each job's recorded steps and checkpoints forgotten first.
        return self._confirm_then(
            request,
            queryset,
            action="replay_from_start_selected",
            needed=JobStatus.DEAD,
            verb="Replay from the start",
            act=functools.partial(services.replay, restart=True),
            past="Replayed {} job(s) from the start.",
        )

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        # PENDING and WAITING ones (a workflow's member, a job waiting for an event) are cancelled now;
        # RUNNING ones are asked to stop (services.cancel decides).
        return self._confirm_then(
            request,
            queryset,
            action="cancel_selected",
            needed=(JobStatus.PENDING, JobStatus.WAITING, JobStatus.RUNNING),
            verb="Cancel",
            act=services.cancel,
        )

    def _confirm_then(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        *,
        action: str,
        needed: str | tuple[str, ...],
        verb: str,
        act: Any,
        past: str = "",
    ) -> HttpResponse | None:
        statuses = (needed,) if isinstance(needed, str) else needed
        needed = " or ".join(statuses)
        jobs = list(queryset.order_by("-created_at")[: MAX_SELECTION + 1])
        if len(jobs) > MAX_SELECTION:
            # "Select all N" over a large table would build a page listing every job.
            self.message_user(
                request,
                f"More than {MAX_SELECTION} jobs are selected; {verb.lower()} at most {MAX_SELECTION} at a time. "
                f"Filter the list (status {needed}, a kind, a queue), select the page and repeat: each round "
                f"leaves the list. For more, use POST /v1/jobs/<id>/{verb.lower()} from a script.",
                messages.ERROR,
            )
            return None
        eligible = [j for j in jobs if j.status in statuses]
        skipped = [j for j in jobs if j.status not in statuses]
        if request.POST.get("confirm") != "yes":
            return TemplateResponse(
                request,
                "admin/reliableq/job/confirm_action.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": self.model._meta,
                    "title": f"{verb} {len(eligible)} job(s)?",
                    "verb": verb,
                    "action": action,
                    "needed": needed,
                    "eligible": eligible,
                    "skipped": skipped,
                    "all_jobs": jobs,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        done = requested = 0
        for job in eligible:
            try:
                changed = act(job.pk, by=request.user)  # audited by the service, as the API's calls are
            except WrongStatus:
                skipped.append(job)  # changed since the confirmation page
                continue
            if changed.status == JobStatus.RUNNING:
                requested += 1  # a cancel request: the handler stops when it next looks
            else:
                done += 1
        if done:
            said = past.format(done) if past else f"{verb}ed {done} job(s).".replace("Canceled", "Cancelled")
            self.message_user(request, said, messages.SUCCESS)
        if requested:
            self.message_user(
                request,
                f"Asked {requested} running job(s) to stop: each ends CANCELLED when its handler stops.",
                messages.SUCCESS,
            )
        if skipped:
            self.message_user(request, f"Skipped {len(skipped)} job(s) that are not {needed}.", messages.WARNING)
        return None

    def get_urls(self) -> list[Any]:
        return [
            path("<path:object_id>/replay/", self.admin_site.admin_view(self.replay_one), name="reliableq_job_replay"),
            path(
                "<path:object_id>/replay-from-start/",
                self.admin_site.admin_view(self.replay_from_start_one),
                name="reliableq_job_replay_from_start",
            ),
            path("<path:object_id>/cancel/", self.admin_site.admin_view(self.cancel_one), name="reliableq_job_cancel"),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        extra = {"is_nav_sidebar_enabled": False, **(extra_context or {})}  # the attempt rows need the width
        job = self.get_object(request, object_id)
        extra["can_replay"] = bool(job and job.status == JobStatus.DEAD and self.has_replay_permission(request))
        extra["can_cancel"] = bool(
            job
            and (
                job.status in (JobStatus.PENDING, JobStatus.WAITING)
                or (job.status == JobStatus.RUNNING and not job.cancel_requested_at)
            )
            and self.has_cancel_permission(request)
        )
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def replay_one(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return _replay_one(request, self, object_id)

    def replay_from_start_one(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return _act_on_one(
            request,
            self,
            object_id,
            verb="Replay from the start",
            allowed=self.has_replay_permission(request),
            act=functools.partial(services.replay, restart=True),
            done=lambda job: f"Job {job.id} replayed from the start: its steps forgotten, it is PENDING again.",
        )

    def cancel_one(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return _cancel_one(request, self, object_id)


def _now(job: Job) -> Any:
    """The database's time as the job's row was read (get_queryset), or this process's for a row read otherwise."""
    return getattr(job, "db_now", None) or timezone.now()


def _replay_one(request: HttpRequest, model_admin: JobAdmin, object_id: str) -> HttpResponse:
    return _act_on_one(
        request,
        model_admin,
        object_id,
        verb="Replay",
        allowed=model_admin.has_replay_permission(request),
        act=services.replay,
        done=lambda job: f"Job {job.id} replayed: it is PENDING again.",
    )


def _cancel_one(request: HttpRequest, model_admin: JobAdmin, object_id: str) -> HttpResponse:
    def done(job: Job) -> str:
        if job.status == JobStatus.RUNNING:
            return f"Job {job.id} was asked to stop: it ends CANCELLED when its handler stops."
        return f"Job {job.id} cancelled: no worker will run it."

    return _act_on_one(
        request,
        model_admin,
        object_id,
        verb="Cancel",
        allowed=model_admin.has_cancel_permission(request),
        act=services.cancel,
        done=done,
    )


def _act_on_one(
    request: HttpRequest,
    model_admin: JobAdmin,
    object_id: str,
    *,
    verb: str,
    allowed: bool,
    act: Callable[..., Job],
    done: Callable[[Job], str],
) -> HttpResponse:
    """A job page's button: a confirmation page (GET, or a POST without confirm=yes), then on
    confirmation the service call (audited as the user) and a message."""
    if not allowed:
        raise PermissionDenied
    job = model_admin.get_object(request, object_id)
    if job is None:
        return HttpResponseRedirect(reverse("admin:reliableq_job_changelist"))
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    if request.method != "POST" or request.POST.get("confirm") != "yes":
        return TemplateResponse(
            request,
            "admin/reliableq/job/confirm_one.html",
            {
                **model_admin.admin_site.each_context(request),
                "opts": Job._meta,
                "title": f"{verb} job {str(job.pk)[-8:]}?",
                "verb": verb,
                "job": job,
            },
        )
    try:
        job = act(job.pk, by=request.user)
    except WrongStatus as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
    else:
        model_admin.message_user(request, done(job), messages.SUCCESS)
    return HttpResponseRedirect(reverse("admin:reliableq_job_change", args=[job.pk]))
