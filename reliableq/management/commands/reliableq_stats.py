"""python manage.py reliableq_stats: the queue's health as a table (what /metrics exports)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ... import metrics
from ...models import JobStatus
from ...queue import horizon, stats


class Command(BaseCommand):
    help = "Print jobs by status and kind, the oldest due job's age, DEAD count, attempts by outcome and durations."

    def handle(self, *args: Any, **options: Any) -> None:
        snapshot = stats.snapshot()
        out = self.stdout
        statuses = list(JobStatus.values)
        width = max([len("kind"), *(len(k) for k in snapshot["by_kind"])])
        out.write(f"{'kind':<{width}}  " + "  ".join(f"{s:>9}" for s in statuses))
        for kind, counts in sorted(snapshot["by_kind"].items()):
            out.write(f"{kind:<{width}}  " + "  ".join(f"{counts.get(s, 0):>9}" for s in statuses))
        out.write(f"{'all':<{width}}  " + "  ".join(f"{snapshot['by_status'][s]:>9}" for s in statuses))
        out.write("")
        out.write(f"oldest due PENDING job waited: {snapshot['oldest_due_pending_age_seconds']:.1f}s")
        out.write(f"DEAD jobs: {snapshot['dead']}")
        held = horizon.horizon()
        out.write(
            f"xmin horizon: {held.age_seconds:.1f}s old, {held.age_xids} transactions"
            + (f", held by {held.holder}" if held.holder else "")
        )
        out.write("dead tuples: " + ", ".join(f"{t} {n}" for t, n in horizon.dead_tuples().items()))
        last_hour = stats.last_hour()
        out.write(f"attempts in the last hour: {last_hour['attempts']} ({last_hour['failures']} failed)")
        out.write("")
        out.write("attempts by outcome: " + ", ".join(f"{o} {n}" for o, n in metrics.attempts_by_outcome().items()))
        for kind, (cumulative, total, count) in sorted(metrics.histograms().items()):
            median = next((b for b, c in zip(metrics.BUCKETS, cumulative, strict=True) if c >= count / 2), None)
            mean = total / count if count else 0.0
            out.write(f"  {kind}: {count} finished attempt(s), mean {mean:.3f}s, median <= {median}s")
