"""Create a charge once per idempotency key: the service behind POST /v1/charges."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from django.db import connections, router

from .models import Charge

CHARGE = Charge._meta.db_table


class KeyReused(Exception):
    """The idempotency key already belongs to a charge made from another request."""

    def __init__(self, original: Charge) -> None:
        self.original = original
        super().__init__(
            f"Idempotency key {original.idempotency_key!r} was already used for another request "
            f"(charge {original.id}: {original.amount} {original.currency})."
        )


@dataclass(frozen=True, slots=True)
class Created:
    charge: Charge
    created: bool  # False: the original charge for a repeated key and request


def fingerprint(*, amount: int, currency: str, description: str) -> str:
    canonical = json.dumps(
        {"amount": amount, "currency": currency.upper(), "description": description},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def create_charge(*, idempotency_key: str, amount: int, currency: str, description: str = "") -> Created:
    """Insert the charge, or find the one this key already made; never select-then-insert.

    INSERT ... ON CONFLICT DO NOTHING lets the unique index decide: a concurrent request with
    the same key waits for the first to commit, then inserts nothing and reads the winner.
    """
    currency = currency.upper()
    print_ = fingerprint(amount=amount, currency=currency, description=description)
    # The charge service's own database (default, unless the project's routers say otherwise),
    # never the queue's: the insert and the reads after it on the one the routers pick for writes.
    alias = router.db_for_write(Charge)
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {CHARGE} (id, idempotency_key, amount, currency, description, request_fingerprint, created_at)
            VALUES (gen_random_uuid(), %s, %s, %s, %s, %s, now())
            ON CONFLICT (idempotency_key) DO NOTHING
            RETURNING id
            """,
            (idempotency_key, amount, currency, description, print_),
        )
        row = cursor.fetchone()
    if row is not None:
        return Created(charge=Charge.objects.using(alias).get(pk=row[0]), created=True)
    original = Charge.objects.using(alias).get(idempotency_key=idempotency_key)
    if original.request_fingerprint != print_:
        raise KeyReused(original)
    return Created(charge=original, created=False)
