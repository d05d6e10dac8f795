"""The flow-control counts of /v1/stats, /v1/metrics and GET /v1/queues read unfinished rows only,
through the partial indexes, under every statistics state: never a scan of the whole job table."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import reliableq
from reliableq import registry, services
from reliableq.models import Job, JobStatus
from reliableq.queue import stats

from . import tables
from .explain import Plan, capture, nodes, quiet

STATES: dict[str, Callable[[tables.Mix], None]] = {
    "never_analyzed": tables.never_analyzed,
    "analyzed_empty": tables.analyzed_empty,
    "analyzed_small": tables.analyzed_small,
    "analyzed_mid_load": tables.analyzed_mid_load,
    "pile_up": tables.pile_up(200_000),
}
MIX = tables.WORKING_SET


def heap_rows_read(plan: Plan) -> int:
    """Rows of the job table that the plan's scans looked at (returned, or filtered out), once each."""
    total = 0.0
    for node in nodes(plan.root):
        if node.get("Relation Name") == tables.JOB and "Scan" in node["Node Type"]:
            seen = sum(float(node.get(k, 0)) for k in ("Actual Rows", "Rows Removed by Filter"))
            total += seen * float(node.get("Actual Loops", 1))
    return round(total)


@pytest.fixture
def capped_kind() -> Iterator[None]:
    """tables.CAPPED with a cap its RUNNING rows have reached, and a per-key limit: every statement runs."""
    saved = dict(registry._handlers)
    registry._handlers.pop(tables.CAPPED, None)
    reliableq.handler(tables.CAPPED, max_running=1, max_running_per_key=1)(lambda job: None)
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


@pytest.mark.parametrize("state", list(STATES))
def test_paused_throttled_and_queue_counts_never_scan_the_whole_job_table(
    plan_tables: None, capped_kind: None, state: str
) -> None:
    STATES[state](MIX)
    with quiet():
        services.pause(tables.QUEUES[1])
        unfinished = Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).count()
    assert unfinished < Job.objects.count() * 0.7

    with capture() as captured:
        paused = stats.paused_due()
        throttled = stats.throttled_due()
        stats.queue_summaries([tables.QUEUES[0]])

    assert paused > 0 and throttled > 0
    for plan in captured.plans:
        if tables.JOB not in plan.sql:
            continue
        assert not [s for s in plan.scans() if s.startswith("Seq Scan")], (state, plan.text())
        assert heap_rows_read(plan) <= unfinished, (state, heap_rows_read(plan), plan.text().replace("\n", " | "))
