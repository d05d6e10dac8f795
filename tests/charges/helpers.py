"""Counts read from PostgreSQL, in the words of DESIGN.md."""

from __future__ import annotations

from charges.models import Charge, ChargeRequest
from reliableq.models import Attempt, Job, Outcome


def effect_key(job: Job) -> str:
    return f"reliableq:charge:{job.id}"


def counts(job: Job) -> dict[str, int]:
    """A (attempts), H (requests that reached the service), C (charges), F (successful finalizations)."""
    job.refresh_from_db()
    key = effect_key(job)
    return {
        "A": Attempt.objects.filter(job=job).count(),
        "H": ChargeRequest.objects.filter(idempotency_key=key).count(),
        "C": Charge.objects.filter(idempotency_key=key).count(),
        "F": Attempt.objects.filter(job=job, outcome=Outcome.SUCCEEDED).count(),
    }


def outcomes(job: Job) -> list[str]:
    return list(Attempt.objects.filter(job=job).order_by("number").values_list("outcome", flat=True))
