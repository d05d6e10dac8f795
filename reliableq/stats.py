"""What operators watch: counts by status and kind, and the age of the oldest due job."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connection
from django.db.models import Count, Q
from django.db.models.functions import Now

from .models import Attempt, Job, JobStatus, Outcome


def oldest_due_age_seconds() -> float:
    """Seconds the oldest due PENDING job has waited past its run_at (0 when none), by database time."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(run_at)), 0) FROM {Job._meta.db_table} "
            "WHERE status = 'PENDING' AND run_at <= now()"
        )
        (age,) = cursor.fetchone()
    return max(0.0, float(age))


def queues(limit: int | None = None) -> list[str]:
    """Distinct queue names by a loose index scan: one index probe per queue, not a table scan.

    With `limit`, the first `limit` names in order: the recursion is pulled on demand and stops there.
    """
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH RECURSIVE q(name) AS (
                (SELECT queue FROM {table} ORDER BY queue LIMIT 1)
                UNION ALL
                SELECT (SELECT queue FROM {table} WHERE queue > q.name ORDER BY queue LIMIT 1)
                  FROM q WHERE q.name IS NOT NULL
            )
            SELECT name FROM q WHERE name IS NOT NULL LIMIT %s
            """,
            [limit],
        )
        return [row[0] for row in cursor.fetchall()]


FAILED = (Outcome.FAILED_TRANSIENT, Outcome.FAILED_PERMANENT, Outcome.TIMED_OUT, Outcome.LEASE_EXPIRED, Outcome.LEASE_LOST)


def last_hour() -> dict[str, int]:
    """Attempts started in the last hour (database time) and how many of them failed."""
    recent = Attempt.objects.filter(started_at__gte=Now() - dt.timedelta(hours=1))
    counts = recent.aggregate(attempts=Count("id"), failures=Count("id", filter=Q(outcome__in=FAILED)))
    return {"attempts": counts["attempts"], "failures": counts["failures"]}


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
