"""Settings for the benchmark harness's processes only: testproject's, plus the peers' apps.

The harness points DATABASE_URL at its own embedded PostgreSQL (.pgdata/bench) before any
process loads these settings, so nothing here touches the tests' server. The peers are added
only when installed (`pip install -e ".[bench]"`), so the harness still runs without them.
"""

from __future__ import annotations

import os
from importlib.util import find_spec

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS, LOGGING, TASKS

HAVE_PROCRASTINATE = find_spec("procrastinate") is not None
HAVE_TASKS_DB = find_spec("django_tasks_db") is not None

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
if HAVE_PROCRASTINATE:
    INSTALLED_APPS.append("procrastinate.contrib.django")
if HAVE_TASKS_DB:
    INSTALLED_APPS.append("django_tasks_db")
    # Django's tasks framework with its database backend, as a Django team would set it up.
    TASKS = {**TASKS, "dbpeer": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["bench"]}}

# The long-transaction scenario reads every claim's duration from the workers (BENCH_CLAIM_LOG: a file).
if os.environ.get("BENCH_CLAIM_LOG"):
    LOGGING = {
        **LOGGING,
        "formatters": {**LOGGING["formatters"], "claim": {"format": "%(created).3f %(message)s"}},
        "handlers": {
            **LOGGING["handlers"],
            "claims": {"class": "logging.FileHandler", "filename": os.environ["BENCH_CLAIM_LOG"], "formatter": "claim"},
        },
        "loggers": {
            **LOGGING["loggers"],
            "reliableq.worker.claim": {"handlers": ["claims"], "level": "DEBUG", "propagate": False},
        },
    }

# The tracing scenario's workers with a real SDK that records every span and drops it when exported.
# BENCH_OTEL=sampled: the same with 1% of the traces sampled (ParentBased(TraceIdRatioBased(0.01))).
if os.environ.get("BENCH_OTEL") in ("sdk", "sampled"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class _Drop(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    _sampled = os.environ["BENCH_OTEL"] == "sampled"
    _provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.01))) if _sampled else TracerProvider()
    _provider.add_span_processor(BatchSpanProcessor(_Drop()))
    trace.set_tracer_provider(_provider)
