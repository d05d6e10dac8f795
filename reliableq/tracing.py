"""OpenTelemetry, when opentelemetry-api is installed (`pip install "django-reliableq[otel]"`).

`enqueue` runs in a PRODUCER span `<kind> publish` and stores its W3C trace context on the job;
each attempt runs in a CONSUMER span `<kind> process` whose parent is that stored context, so the
attempt shows up under the request that enqueued it, across processes. Attributes follow the
messaging semantic conventions (messaging.system "reliableq", the queue as the destination, the
job id as the message id) plus the attempt number and its outcome; a failed attempt records its
exception. Without the package, or without an SDK configured (the API's own no-op provider), every function
here is a no-op that costs a check.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the optional extra is not installed
    trace = None  # type: ignore[assignment]

logger = logging.getLogger("reliableq.tracing")
SYSTEM = "reliableq"
_TRACER = "reliableq"


_sdk = False  # a provider, once set, stays: OpenTelemetry refuses to replace it
# Where the API keeps the provider set_tracer_provider() installed (None until one is). Reading it
# spares each job get_tracer_provider()'s look into os.environ while no SDK is configured; one named
# by OTEL_PYTHON_TRACER_PROVIDER is only loaded by that call, so with the variable set it is made.
_GLOBAL = "_TRACER_PROVIDER"
_direct = trace is not None and hasattr(trace, _GLOBAL) and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ


def enabled() -> bool:
    """Whether spans are made: the API installed and a tracer provider configured (an SDK)."""
    global _sdk
    if _sdk or trace is None:
        return _sdk
    if _direct and getattr(trace, _GLOBAL) is None:
        return False
    _sdk = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _sdk


@contextmanager
def publishing(kind: str, queue: str, count: int = 1) -> Iterator[dict[str, str] | None]:
    """A PRODUCER span around an enqueue; yields the W3C context to store on the job(s), or None."""
    if not enabled():  # no API, or no SDK: nothing would record a span
        yield None
        return
    tracer = trace.get_tracer(_TRACER)
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "publish",
        "messaging.destination.name": queue,
        "reliableq.kind": kind,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with tracer.start_as_current_span(f"{kind} publish", kind=SpanKind.PRODUCER, attributes=attributes) as span:
        carrier: dict[str, str] = {}
        if span.get_span_context().is_valid:
            propagate.inject(carrier)
        yield carrier or None


@contextmanager
def incoming(headers: dict[str, Any]) -> Iterator[None]:
    """Within a request that carries a W3C `traceparent` and no span of the project's own
    instrumentation, make that context current: the job's publish span becomes its child."""
    if not enabled() or "HTTP_TRACEPARENT" not in headers or trace.get_current_span().get_span_context().is_valid:
        yield
        return
    carrier = {"traceparent": headers["HTTP_TRACEPARENT"]}
    if "HTTP_TRACESTATE" in headers:
        carrier["tracestate"] = headers["HTTP_TRACESTATE"]
    token = otel_context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()  # reusable: it holds no state


def processing(job: Any) -> AbstractContextManager[Any]:
    """A CONSUMER span for one attempt, a child of the context stored at enqueue; yields the span (or None)."""
    if not enabled():
        return _NO_SPAN  # no generator to make and resume for each attempt when nothing records spans
    return _processing(job)


@contextmanager
def _processing(job: Any) -> Iterator[Any]:
    carrier = job.trace_context if isinstance(job.trace_context, dict) else None
    try:
        parent = propagate.extract(carrier) if carrier else otel_context.Context()
    except Exception:  # a stored context it cannot read: the attempt runs in a trace of its own
        logger.warning("job=%s: its stored trace context cannot be read; tracing the attempt on its own", job.id)
        parent = otel_context.Context()
    tracer = trace.get_tracer(_TRACER)
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "reliableq.kind": job.kind,
        "reliableq.attempt": job.attempt,
    }
    with tracer.start_as_current_span(
        f"{job.kind} process",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


# The outcomes of a failed attempt (reliableq.models.Outcome), named here to keep this module light.
_FAILED = frozenset({"FAILED_TRANSIENT", "FAILED_PERMANENT", "TIMED_OUT"})


def ended(span: Any, outcome: str, exc: BaseException | None = None, error: str = "") -> None:
    """Say on the attempt's span how it ended; a failure records its exception, or its error when the
    attempt failed with nothing raised (a return value that cannot be stored)."""
    if span is None:
        return
    span.set_attribute("reliableq.outcome", str(outcome))
    if exc is not None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    elif str(outcome) in _FAILED:
        span.set_status(Status(StatusCode.ERROR, error or str(outcome)))
