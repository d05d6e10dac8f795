"""What OpenTelemetry costs the no-op fleet: not installed, the API alone, and an SDK that records every span."""

from __future__ import annotations

from pathlib import Path

from ..core import Summary, ratio
from .context import Bench
from .helpers import Section, fmt_ratio, table
from .registry import scenario

HIDDEN = Path(__file__).resolve().parent.parent / "without_otel"  # an `opentelemetry` that fails to import


@scenario("tracing", title="OpenTelemetry's cost", knobs=("reps", "seconds", "min_jobs", "fleet"))
def tracing(bench: Bench, s: Section) -> None:
    processes, concurrency = bench.p.fleet
    s.intro = (
        f"No-op jobs, {processes} worker processes x {concurrency}, side by side: opentelemetry not "
        "installed (hidden from the workers), the API installed with no SDK (its no-op tracer), and the "
        "SDK configured with a BatchSpanProcessor whose exporter drops what it is given (every attempt's "
        "span recorded and exported, nothing sent anywhere)."
    )
    runs: dict[str, Summary] = {}
    for label, env in (
        ("not installed", {"PYTHONPATH": str(HIDDEN)}),
        ("API, no SDK", {}),
        ("SDK configured", {"BENCH_OTEL": "sdk"}),
        ("SDK, 1% sampled", {"BENCH_OTEL": "sampled"}),
    ):
        bench.say(f"tracing: {label}")
        tag = "otel-" + "-".join(label.replace(",", "").replace("%", "").split())
        runs[label] = bench.sweep(
            bench.rq, processes=processes, concurrency=concurrency, job="noop", tag=tag,
            guess=3000, env=env,
        )  # fmt: skip
    base = runs["not installed"]
    s.tables.append(
        table(
            ["opentelemetry", "jobs/s", "of not installed"],
            [[label, got.text(), fmt_ratio(ratio(got.median, base.median))] for label, got in runs.items()],
        )
    )
    s.notes.append(
        "Goal: within 5% of not installed. The API alone makes no span (no SDK, nothing would record it). "
        "An SDK that records every attempt's span pays the SDK's own cost per span, about the size of a "
        "no-op job's; sampling is the lever."
    )
    s.data = {label: got.to_json() for label, got in runs.items()}
