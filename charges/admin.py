"""Charges, read-only: what the service committed, searchable by idempotency key."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from reliableq.admin import ReadOnlyAdmin, register_effect_link
from reliableq.models import Job

from .models import Charge


def charge_link(job: Job) -> str:
    """On a charge job's page: the charge its effect key made (if any), through the charges list."""
    url = reverse("admin:charges_charge_changelist")
    return format_html('<a href="{}?q={}">charges with key {}</a>', url, job.effect_key, job.effect_key)


register_effect_link("charge", charge_link)


@admin.register(Charge)
class ChargeAdmin(ReadOnlyAdmin):
    list_display = ["id", "idempotency_key", "amount", "currency", "description", "created_at"]
    search_fields = ["=idempotency_key"]
    search_help_text = "An idempotency key, exactly (reliableq:charge:<job id> for the charge job)."
    ordering = ["-created_at"]
    show_full_result_count = False
    readonly_fields = [
        "id",
        "idempotency_key",
        "amount",
        "currency",
        "description",
        "request_fingerprint",
        "created_at",
    ]
