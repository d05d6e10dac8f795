"""Charges, made once per idempotency key, and the log of every request the service received."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models.functions import Now


class Charge(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # UNIQUE is the enforcement: concurrent requests with one key make one row.
    idempotency_key = models.CharField(max_length=255, unique=True)
    amount = models.BigIntegerField(help_text="In minor units (cents).")
    currency = models.CharField(max_length=3)
    description = models.CharField(max_length=500, blank=True, default="")
    request_fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the canonical request.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="charges_charge_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.currency} ({self.idempotency_key})"


class ChargeRequest(models.Model):
    """One row per authenticated POST /v1/charges, written before anything else happens.

    It counts the handler runs that reached the service (H), whatever became of them.
    (Requests refused at authentication never reach the view and are not counted.)
    """

    id = models.BigAutoField(primary_key=True)
    idempotency_key = models.CharField(max_length=255, blank=True, db_index=True)
    received_at = models.DateTimeField(db_default=Now())
    fault = models.CharField(max_length=20, blank=True, default="", help_text="The fault injected, if any.")

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"request for {self.idempotency_key or '(no key)'}"


class ServiceFault(models.Model):
    """The fault knob: one row, read per request, honoured only when FAULT_INJECTION is on."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    delay_seconds = models.FloatField(default=0.0, help_text="Sleep this long before answering.")
    unavailable_rate = models.FloatField(default=0.0, help_text="Answer 503 before doing anything, at this rate.")
    no_answer_rate = models.FloatField(
        default=0.0, help_text="Commit the charge, then drop the connection without answering, at this rate."
    )

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="charges_servicefault_single_row")]

    def __str__(self) -> str:
        return "charge service faults"
