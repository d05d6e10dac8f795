"""A real OpenTelemetry SDK for the tests: spans as JSON lines in a file, from whichever process ends them."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileExporter(SpanExporter):
    """Each ended span as one line of JSON (ids in hex, as W3C writes them)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock, open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(describe(span)) + "\n")
        return SpanExportResult.SUCCESS


def describe(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "events": [event.name for event in span.events],
        "status": span.status.status_code.name,
        "pid": os.getpid(),
    }


def export_to(path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(path)))
    trace.set_tracer_provider(provider)
