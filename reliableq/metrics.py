"""Prometheus metrics read from PostgreSQL at scrape time: one endpoint sees the whole fleet.

Counters (attempts, lease losses, handler durations) are computed from the attempt rows,
so they cover every worker on every host; pruning finished jobs makes them drop, which
Prometheus reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from . import schedules
from .models import JobStatus, Outcome
from .queue import horizon, parked, stats, workers

MAX_QUEUE_SERIES = 100
BUCKETS = stats.DURATION_BUCKETS
histograms = stats.histograms
attempts_by_outcome = stats.attempts_by_outcome


class QueueCollector(Collector):
    def collect(self) -> Iterator[Any]:
        snapshot = stats.snapshot()
        jobs = GaugeMetricFamily("reliableq_jobs", "Jobs by status and kind.", labels=["status", "kind"])
        for kind, by_status in sorted(snapshot["by_kind"].items()):
            for status in JobStatus.values:
                jobs.add_metric([status, kind], by_status.get(status, 0))
        yield jobs
        yield GaugeMetricFamily(
            "reliableq_oldest_due_job_age_seconds",
            "How long the oldest due PENDING job has waited past its run_at (0 when none): the health signal.",
            value=snapshot["oldest_due_pending_age_seconds"],
        )
        yield GaugeMetricFamily("reliableq_dead_jobs", "DEAD jobs waiting for a person.", value=snapshot["dead"])
        yield GaugeMetricFamily(
            "reliableq_paused_jobs", "Due PENDING jobs in queues paused now.", value=snapshot["paused"]
        )
        yield GaugeMetricFamily(
            "reliableq_throttled_jobs",
            "Due PENDING jobs in running queues that a max_running, rate_limit or max_running_per_key holds back now.",
            value=snapshot["throttled"],
        )
        waiting, sleeping = parked.parked()
        yield GaugeMetricFamily(
            "reliableq_waiting_jobs",
            "Jobs WAITING for an event (job.wait_for): no slot, no lease, until an emit or their timeout.",
            value=waiting,
        )
        yield GaugeMetricFamily(
            "reliableq_sleeping_jobs",
            "PENDING jobs in a durable sleep (job.sleep) that has not ended: no slot, no lease until it does.",
            value=sleeping,
        )
        paused = GaugeMetricFamily(
            "reliableq_queue_paused", "1 while the queue is paused (no claims), else 0.", labels=["queue"]
        )
        # Per-queue series for the first MAX_QUEUE_SERIES queues by name: a label per queue name,
        # whatever the table holds, would let the number of names decide the scrape's size.
        listed, more = stats.queue_page(limit=MAX_QUEUE_SERIES)
        for queue in listed:
            paused.add_metric([queue.name], 1 if queue.paused else 0)
        yield paused
        unserved = GaugeMetricFamily(
            "reliableq_queue_unserved",
            "1 while the queue has due jobs and no live worker serves it (a paused queue counts 0), else 0.",
            labels=["queue"],
        )
        idle = workers.unserved(listed)
        for queue in listed:
            unserved.add_metric([queue.name], 1 if queue.name in idle else 0)
        yield unserved
        yield GaugeMetricFamily(
            "reliableq_workers", "Worker processes seen within their lease.", value=workers.live().count()
        )
        yield GaugeMetricFamily(
            "reliableq_queue_series_truncated",
            f"1 when more queues exist than the {MAX_QUEUE_SERIES} given per-queue series (see GET /v1/queues).",
            value=1 if more is not None else 0,
        )
        outcomes = attempts_by_outcome()
        attempts = CounterMetricFamily("reliableq_attempts", "Attempts by outcome.", labels=["outcome"])
        for outcome, n in outcomes.items():
            attempts.add_metric([outcome], n)
        yield attempts
        losses = CounterMetricFamily("reliableq_lease_losses", "Leases taken back from their owner.", labels=["reason"])
        losses.add_metric(["expired"], outcomes[Outcome.LEASE_EXPIRED])
        losses.add_metric(["lost"], outcomes[Outcome.LEASE_LOST])
        yield losses
        durations = HistogramMetricFamily(
            "reliableq_handler_duration_seconds", "Handler run time of finished attempts, by kind.", labels=["kind"]
        )
        for kind, (cumulative, total, count) in sorted(histograms().items()):
            buckets = [(str(b), c) for b, c in zip(BUCKETS, cumulative, strict=True)] + [("+Inf", count)]
            durations.add_metric([kind], buckets, total)
        yield durations
        held = horizon.horizon()
        yield GaugeMetricFamily(
            "reliableq_xmin_horizon_age_seconds",
            "Age of the oldest snapshot or prepared transaction holding back vacuum on the queue's database.",
            value=held.age_seconds,
        )
        yield GaugeMetricFamily(
            "reliableq_xmin_horizon_age_xids",
            "Transactions since the oldest xmin holding back vacuum (replication slots included).",
            value=held.age_xids,
        )
        dead = GaugeMetricFamily("reliableq_dead_tuples", "Dead row versions in the queue's tables.", labels=["table"])
        for table, n in horizon.dead_tuples().items():
            dead.add_metric([table], n)
        yield dead


class ScheduleCollector(Collector):
    def collect(self) -> Iterator[Any]:
        figures, more = schedules.health(limit=MAX_SCHEDULE_SERIES)
        lag = GaugeMetricFamily(
            "reliableq_schedule_lag_seconds",
            "Seconds since the enabled schedule's last slot's job started (since the slot, until it starts).",
            labels=["schedule"],
        )
        failed = GaugeMetricFamily(
            "reliableq_schedule_last_job_failed", "1 when the schedule's last slot's job is DEAD, else 0.",
            labels=["schedule"],
        )  # fmt: skip
        for figure in figures:
            if figure.lag_seconds is not None:
                lag.add_metric([figure.name], figure.lag_seconds)
            failed.add_metric([figure.name], 1 if figure.last_failed else 0)
        yield lag
        yield failed
        yield GaugeMetricFamily(
            "reliableq_schedule_series_truncated",
            f"1 when more enabled schedules exist than the {MAX_SCHEDULE_SERIES} given per-schedule series.",
            value=1 if more else 0,
        )


MAX_SCHEDULE_SERIES = 100


def registry() -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(QueueCollector())
    reg.register(ScheduleCollector())
    return reg
