"""The schedule list and a schedule's page: add, edit, enable, disable and run now (through
reliableq.schedules, which decides what a valid schedule is). Every change is audited: the admin's
own LogEntry for an add or an edit, the service's for the actions."""

from __future__ import annotations

import zoneinfo
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from .. import registry, schedules
from ..errors import InvalidJob, UnknownKind, WrongStatus
from ..models import Schedule
from . import times as admin_times
from .common import RefusesNul, status_badge

CHANGE = "reliableq.change_schedule"


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """The rules are reliableq.schedules.check's: each refusal is an error on the field it names."""

    kind = forms.ChoiceField(choices=())
    payload = forms.JSONField(required=False, initial=dict, help_text="A JSON object, merged into each job's payload.")

    class Meta:
        model = Schedule
        fields = ["name", "kind", "cron", "timezone", "payload", "enabled", "catch_up", "overlap", "queue", "priority"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kinds = [kind for kind in registry.kinds() if not registry.is_task_kind(kind)]
        current = self.instance.kind if self.instance.pk else None
        if current and current not in kinds:
            kinds.append(current)  # a kind this process no longer registers: shown, and refused on save
        if "kind" in self.fields:  # read-only (not in the form) for a schedule declared in code
            self.fields["kind"].choices = [(kind, kind) for kind in kinds]  # type: ignore[attr-defined]
        if "timezone" in self.fields:
            self.fields["timezone"].widget.attrs["list"] = "rq-timezones"

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())
        if self.errors:
            return data
        if "payload" in self.fields and data.get("payload") is None:
            data["payload"] = {}
        values = {name: data[name] if name in self.fields else getattr(self.instance, name) for name in CHECKED}
        try:
            schedules.check(**values)
        except InvalidJob as exc:
            self.add_error(exc.field if exc.field in self.fields else None, str(exc))
        return data


CHECKED = ("name", "kind", "cron", "payload", "timezone", "catch_up", "overlap", "queue", "priority")


@admin.register(Schedule)
class ScheduleAdmin(RefusesNul, admin.ModelAdmin):  # type: ignore[type-arg]
    form = ScheduleForm
    list_display = ["name", "kind", "cron_display", "timezone", "enabled", "last_slot_display", "next_slot_display",
                    "origin"]  # fmt: skip
    list_filter = ["enabled", "from_code"]
    search_fields = ["name", "kind"]
    search_help_text = "Part of a schedule's name or kind."
    ordering = ["name"]
    list_per_page = 100
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["enable_selected", "disable_selected", "run_now_selected"]
    readonly_fields = ["origin", "last_slot_display", "next_slot_display", "created", "updated"]
    fieldsets = [
        (None, {"fields": ("name", "kind", "cron", "timezone", "payload", "enabled")}),
        ("Missed slots and overlap", {"fields": ("catch_up", "overlap")}),
        ("Jobs", {"fields": ("queue", "priority")}),
        ("State", {"fields": ("origin", "last_slot_display", "next_slot_display", "created", "updated")}),
    ]
    change_form_template = "admin/reliableq/schedule/change_form.html"

    # -- permissions: reliableq.view_schedule to look, reliableq.change_schedule for every change ----

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(CHANGE)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A schedule declared in code would come back at the next worker's start: disable it instead.
        return super().has_delete_permission(request, obj) and (obj is None or not obj.from_code)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is not None and obj.from_code:  # the code is where it changes; only `enabled` here
            return [*self.readonly_fields, "name", "kind", "cron", "timezone", "payload", "catch_up", "overlap",
                    "queue", "priority"]  # fmt: skip
        if obj is not None:  # the name is in its jobs' keys and payloads: a new name is a new schedule
            return [*self.readonly_fields, "name"]
        return list(self.readonly_fields)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        return lookup in ("enabled__exact", "from_code__exact")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return cast("QuerySet[Schedule]", schedules.with_last_status().order_by(*self.ordering))

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        try:
            schedules.save(obj, changed=frozenset(form.changed_data) if change else None)
        except InvalidJob as exc:  # the form applied the same rules: only a race gets here
            self.message_user(request, str(exc), messages.ERROR)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], add: bool = False, change: bool = False,
        form_url: str = "", obj: Schedule | None = None,
    ) -> Any:  # fmt: skip
        context["timezones"] = sorted(zoneinfo.available_timezones())
        return super().render_change_form(request, context, add, change, form_url, obj)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # The list needs the width at 1,280 px: the app sidebar is one click away on every other page.
        return super().changelist_view(request, {"is_nav_sidebar_enabled": False, **(extra_context or {})})

    # -- columns --------------------------------------------------------------------------

    @admin.display(description="cron", ordering="cron")
    def cron_display(self, schedule: Schedule) -> str:
        return format_html('<code style="white-space:nowrap">{}</code>', schedule.cron)

    @admin.display(description="last slot", ordering="last_slot")
    def last_slot_display(self, schedule: Any) -> str:
        if schedule.last_slot is None:
            return "-"
        when = self._local(schedule, schedule.last_slot)
        status = getattr(schedule, "last_status", None)
        if status is None:
            return format_html("{} <small>(its job was pruned)</small>", when)
        url = reverse("admin:reliableq_job_change", args=[schedule.last_job])
        return format_html('{} <a href="{}" class="rq-last-job">{}</a>', when, url, status_badge(status))

    @admin.display(description="next slot", ordering="next_slot")
    def next_slot_display(self, schedule: Schedule) -> str:
        if not schedule.enabled:
            return "disabled"
        if schedule.next_slot is None:
            return "-"
        now = timezone.now()
        late = " <strong>waiting for a worker that runs its kind</strong>" if not self._runnable(schedule) else ""
        return format_html(
            "{}, {}" + late, self._local(schedule, schedule.next_slot), admin_times.relative(schedule.next_slot, now)
        )

    @admin.display(description="declared")
    def origin(self, schedule: Schedule) -> str:
        return "in code" if schedule.from_code else "in the admin"

    @admin.display(description="created")
    def created(self, schedule: Schedule) -> str:
        return admin_times.to_second(schedule.created_at)

    @admin.display(description="updated")
    def updated(self, schedule: Schedule) -> str:
        return admin_times.to_second(schedule.updated_at)

    @staticmethod
    def _local(schedule: Schedule, moment: Any) -> str:
        """A slot as the schedule's zone reads it (its offset shown), which is how its cron is written:
        the time alone today, with the date otherwise."""
        try:
            zone = zoneinfo.ZoneInfo(schedule.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return admin_times.to_second(moment)
        local, today = moment.astimezone(zone), timezone.now().astimezone(zone).date()
        return f"{local:%H:%M:%S %z}" if local.date() == today else f"{local:%Y-%m-%d %H:%M:%S %z}"

    @staticmethod
    def _runnable(schedule: Schedule) -> bool:
        try:
            registry.get(schedule.kind)
        except UnknownKind:
            return False
        return True

    # -- actions --------------------------------------------------------------------------

    @admin.action(description="Enable selected schedules", permissions=["change"])
    def enable_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool) -> None:
        names = list(queryset.filter(enabled=not enabled).values_list("name", flat=True)[:1000])
        for name in names:
            schedules.set_enabled(name, enabled, by=request.user)  # audited by the service
        verb = "Enabled" if enabled else "Disabled"
        self.message_user(request, f"{verb} {len(names)} schedule(s).", messages.SUCCESS)

    @admin.action(description="Run selected schedules now (one job each)", permissions=["change"])
    def run_now_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for name in queryset.values_list("name", flat=True)[:100]:
            try:
                job = schedules.run_now(name, by=request.user)  # audited by the service
            except (WrongStatus, UnknownKind, InvalidJob) as exc:
                self.message_user(request, f"{name}: {exc}", messages.ERROR)
                continue
            url = reverse("admin:reliableq_job_change", args=[job.pk])
            self.message_user(
                request, format_html('{}: made job <a href="{}">{}</a>.', name, url, str(job.pk)[-8:]), messages.SUCCESS
            )
