"""The scenario registry: the names `--only` takes, their order, their needs and their declared knobs."""

from __future__ import annotations

import dataclasses

import pytest

from bench import scenarios
from bench.profiles import Profile

REPORT_ORDER = [
    "ingestion",
    "throughput",
    "ceilings",
    "io",
    "handlers",
    "tracing",
    "latency",
    "pileup",
    "xmin",
    "soak",
    "flow",
    "fairness",
    "workflows",
    "cancels",
    "recovery",
    "amplification",
    "pooler",
    "fleet",
    "schedules",
    "steps",
]


def test_every_scenario_is_registered_in_the_reports_order() -> None:
    assert scenarios.names() == REPORT_ORDER
    assert all(spec.title for spec in scenarios.REGISTRY.values())


def test_only_keeps_the_reports_order_and_adds_what_a_scenario_needs() -> None:
    assert [s.name for s in scenarios.select(["recovery", "ceilings"])] == ["throughput", "ceilings", "recovery"]
    assert [s.name for s in scenarios.select([])] == REPORT_ORDER


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        scenarios.select(["throughput", "nope"])


def test_every_declared_knob_is_a_profile_field_and_every_field_is_some_scenarios_knob() -> None:
    fields = {f.name for f in dataclasses.fields(Profile)} - {"name"}
    knobs = {knob for spec in scenarios.REGISTRY.values() for knob in spec.knobs}
    assert knobs - fields == set()
    assert fields - knobs == set()


def test_a_name_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        scenarios.scenario("throughput", title="again", knobs=())(lambda bench, section: None)
