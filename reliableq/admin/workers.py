"""The workers panel: live and recently gone workers, what each serves and how busy it was."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from ..models import Worker
from ..queue import workers
from .common import ReadOnlyAdmin


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    """Live and recently gone workers: what each serves and how busy it was at its last beat."""

    list_display = ["id", "state", "host", "pid", "queue_names", "concurrency", "busy", "isolation", "version",
                    "started", "last_seen"]  # fmt: skip
    list_display_links = None
    search_fields = ["=id", "=host"]
    search_help_text = "A worker id or a host name, exactly."
    ordering = ["-last_seen_at"]
    show_full_result_count = False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("reliableq.view_job")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        return cast("QuerySet[Worker]", workers.with_state().order_by(*self.ordering))

    @admin.display(description="state")
    def state(self, worker: Any) -> str:
        if worker.live:
            return mark_safe('<strong style="color:#2e7d32">live</strong>')
        if worker.stopped_at is not None:
            return "stopped"
        return mark_safe('<strong style="color:#b71c1c">gone</strong>')

    @admin.display(description="queues")
    def queue_names(self, worker: Worker) -> str:
        return ", ".join(worker.queues or [])

    @admin.display(description="started", ordering="started_at")
    def started(self, worker: Worker) -> str:
        return f"{worker.started_at:%Y-%m-%d %H:%M:%S}"

    @admin.display(description="last seen", ordering="last_seen_at")
    def last_seen(self, worker: Worker) -> str:
        return f"{worker.last_seen_at:%Y-%m-%d %H:%M:%S} ({timesince(worker.last_seen_at, timezone.now())} ago)"
