"""The job list's filters, each with choices that never scan the whole job table."""

from __future__ import annotations

import uuid
from typing import Any, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest

from ..models import Job, JobStatus
from ..queue import stats

# The most queue names and kinds the filters list (any can still be filtered by its URL).
MAX_QUEUE_CHOICES = 30


MAX_KIND_CHOICES = 50


class _ExactFilter(admin.SimpleListFilter):
    """Filter on one column's exact value, with choices that never scan the whole table."""

    def choices_from(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(v, v) for v in self.choices_from()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(**{str(self.parameter_name): value}) if value else queryset


class KindFilter(_ExactFilter):
    """Kinds that have jobs, by a loose scan of the kind index (no SELECT DISTINCT over the table):
    registered kinds without a job (tests', say) are not offered, a removed kind's DEAD jobs are."""

    title = "kind"
    parameter_name = "kind"

    def choices_from(self) -> list[str]:
        names = stats.kinds(limit=MAX_KIND_CHOICES)
        chosen = self.value()
        if chosen and chosen not in names:
            names.append(chosen)
        return names


class QueueFilter(_ExactFilter):
    """Queues in use, read with a loose index scan over (queue, created_at), the first MAX_QUEUE_CHOICES of them.

    Every list page renders the choices, so thousands of queue names would make every page
    megabytes long; the chosen queue is always listed, so a link to ?queue=<name> still shows it.
    """

    title = "queue"
    parameter_name = "queue"

    def choices_from(self) -> list[str]:
        names = stats.queues(limit=MAX_QUEUE_CHOICES)
        chosen = self.value()
        if chosen and chosen not in names:
            names.append(chosen)
        return names


class LeaseExpiredFilter(admin.SimpleListFilter):
    title = "lease"
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("expired", "Lease expired (owner gone)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(status=JobStatus.RUNNING, lease_expires_at__lte=Now()) if self.value() else queryset


class WorkflowFilter(admin.SimpleListFilter):
    """A workflow's jobs, as its page links them (?workflow=<id>). Offered only while chosen: listing
    workflows here would read their table on every page of the job list."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"workflow {value[-8:]}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if not value:
            return queryset
        try:
            workflow_id = uuid.UUID(value)
        except ValueError:
            return cast("QuerySet[Job]", queryset.none())  # not an id: no workflow has it
        return cast("QuerySet[Job]", queryset.filter(workflow_id=workflow_id))


class WaitingForFilter(admin.SimpleListFilter):
    """Jobs WAITING for an event: any event, or the one named (?waiting_for=<name>, or a search for the
    name). Names are never listed: there may be one per order, millions of them."""

    title = "waiting for"
    parameter_name = "waiting_for"
    ANY = "*"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        choices = [(self.ANY, "any event")]
        value = self.value()
        if value and value != self.ANY:
            choices.append((value, value if len(value) <= 40 else value[:39] + "…"))
        return choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if not value:
            return queryset
        # Both through the partial index of waiting jobs (reliableq_job_waiting_for).
        waiting = queryset.filter(status=JobStatus.WAITING, waiting_for__isnull=False)
        return cast("QuerySet[Job]", waiting if value == self.ANY else waiting.filter(waiting_for=value))
