"""The queue dashboard: counts, charts, queues to pause and resume (through reliableq.services)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from .. import readcache, registry, rules, schedules, services
from ..conf import reliableq_settings
from ..errors import InvalidJob
from ..models import JobStatus, QueueDashboard
from ..queue import horizon, stats, workers
from . import charts
from .common import ReadOnlyAdmin, status_badge


@admin.register(QueueDashboard)
class QueueDashboardAdmin(ReadOnlyAdmin):
    """Shown in the admin index as "Queue dashboard"; its list page is the dashboard."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("reliableq.view_job")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("reliableq.pause_queue")

    def get_urls(self) -> list[Any]:
        return [
            path("pause/", self.admin_site.admin_view(self.pause_view), name="reliableq_queue_pause"),
            path("resume/", self.admin_site.admin_view(self.resume_view), name="reliableq_queue_resume"),
            *super().get_urls(),
        ]

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        return _queue_state(request, self, pause=True)

    def resume_view(self, request: HttpRequest) -> HttpResponse:
        return _queue_state(request, self, pause=False)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        after = request.GET.get("queues_after", "")
        if after and not rules.QUEUE.fullmatch(after):
            raise BadRequest("queues_after must be a queue name.")
        figures = readcache.read("dashboard", _dashboard_figures)
        queues, more = stats.queue_page(after=after, limit=DASHBOARD_QUEUES)
        served = workers.served_queues()  # a queue no live worker serves is not "running"
        held = figures["horizon"]
        snapshot = figures["snapshot"]
        jobs_url = reverse("admin:reliableq_job_changelist")
        return TemplateResponse(
            request,
            "admin/reliableq/queuedashboard/dashboard.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Queue dashboard",
                "snapshot": snapshot,
                "statuses": [
                    (s, snapshot["by_status"][s], status_badge(s), f"{jobs_url}?status__exact={s}")
                    for s in JobStatus.values
                ],
                "kinds": sorted(snapshot["by_kind"].items()),
                "status_names": JobStatus.values,
                "dead_url": f"{jobs_url}?status__exact=DEAD",
                "expired_url": f"{jobs_url}?lease=expired",
                "last_hour": figures["last_hour"],
                "horizon": held,
                "horizon_warning": held.age_seconds > float(reliableq_settings.XMIN_WARNING_SECONDS),
                "xmin_warning_seconds": reliableq_settings.XMIN_WARNING_SECONDS,
                "dead_tuples": figures["dead_tuples"],
                "chart_panels": figures["chart_panels"],
                "queues": queues,
                "unserved": workers.unserved(queues, served),
                "served": served,
                "live_workers": workers.live().count(),
                "queues_after": after,
                "queues_next": "?" + urlencode({"queues_after": more}) if more is not None else "",
                "can_pause": self.has_pause_permission(request),
                "limits": sorted(registry.limits().items()),
                "failed_schedules": figures["failed_schedules"],
            },
        )


DASHBOARD_QUEUES = 50  # queues per page of the dashboard's table


def _dashboard_figures() -> dict[str, Any]:
    """The dashboard's reads that cost the most (counts, the hour's charts), cached by readcache."""
    return {
        "snapshot": stats.snapshot(),
        "horizon": horizon.horizon(),
        "last_hour": stats.last_hour(),
        "dead_tuples": horizon.dead_tuples(),
        "failed_schedules": schedules.failed(),
        "chart_panels": charts.panels(stats.finished_per_minute(), stats.backlog_per_minute(), stats.p95_by_kind()),
    }


@require_POST
def _queue_state(request: HttpRequest, model_admin: QueueDashboardAdmin, *, pause: bool) -> HttpResponse:
    """Pause (optionally until a time) or resume the queue named in the form; services audit it."""
    if not model_admin.has_pause_permission(request):
        raise PermissionDenied
    name = request.POST.get("queue", "")
    until_text = request.POST.get("until", "").strip()
    try:
        if pause:
            until = rules.aware_time(until_text, field="until") if until_text else None
            services.pause(name, until=until, by=request.user)
        else:
            services.resume(name, by=request.user)
    except InvalidJob as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
    else:
        done = "paused" + (f" until {until_text}" if until_text else " until resumed") if pause else "resumed"
        model_admin.message_user(request, f"Queue {name} {done}.", messages.SUCCESS)
    return HttpResponseRedirect(reverse("admin:reliableq_queuedashboard_changelist"))
