"""The benchmark's scenarios, one module each, registered with @scenario in the order the report shows them."""

# Importing a scenario module registers it; this order is the report's (and the run's) order.
from . import ingestion, throughput, ceilings, io, handlers, tracing, latency, pileup, xmin, soak, flow, fairness, workflows, cancels, recovery, amplification, pooling, fleet, schedules, steps  # noqa: F401, I001, E501  # fmt: skip
from .context import Bench
from .helpers import Section
from .registry import REGISTRY, Scenario, names, scenario, select

__all__ = ["REGISTRY", "Bench", "Scenario", "Section", "names", "scenario", "select"]
