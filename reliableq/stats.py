"""What operators watch: counts by status and kind, and the age of the oldest due job."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Count

from .models import Job, JobStatus


def oldest_due_age_seconds() -> float:
    """Seconds the oldest due PENDING job has waited past its run_at (0 when none), by database time."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(run_at)), 0) FROM {Job._meta.db_table} "
            "WHERE status = 'PENDING' AND run_at <= now()"
        )
        (age,) = cursor.fetchone()
    return max(0.0, float(age))


def snapshot() -> dict[str, Any]:
    by_status = {s: 0 for s in JobStatus.values}
    by_kind: dict[str, dict[str, int]] = {}
    for row in Job.objects.values("kind", "status").annotate(n=Count("id")).order_by():
        by_status[row["status"]] += row["n"]
        by_kind.setdefault(row["kind"], {})[row["status"]] = row["n"]
    return {
        "by_status": by_status,
        "by_kind": by_kind,
        "oldest_due_pending_age_seconds": round(oldest_due_age_seconds(), 3),
        "dead": by_status[JobStatus.DEAD],
    }
