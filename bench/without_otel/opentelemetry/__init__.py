"""Put first on PYTHONPATH by the tracing scenario: a process where opentelemetry is not installed."""

raise ImportError("opentelemetry is hidden from this process (bench.scenarios.tracing)")
