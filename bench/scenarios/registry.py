"""The scenario registry: each scenario module declares itself with @scenario; the harness runs them from here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Bench
    from .helpers import Section

# A scenario fills the Section the harness hands it (intro, tables, plots, notes, data) and gates every run.
Run = Callable[["Bench", "Section"], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str  # what `--only` takes; the section's key in results.json
    title: str  # the section's heading in the report
    knobs: tuple[str, ...]  # the Profile fields it reads: what makes it longer or shorter
    needs: tuple[str, ...] = ()  # scenarios whose results it states its own against (run first)
    run: Run


# Insertion order is the report's order: bench/scenarios/__init__.py imports the modules in that order.
REGISTRY: dict[str, Scenario] = {}


def scenario(name: str, *, title: str, knobs: tuple[str, ...], needs: tuple[str, ...] = ()) -> Callable[[Run], Run]:
    """Register the decorated function as the scenario `name`."""

    def register(run: Run) -> Run:
        if name in REGISTRY:
            raise ValueError(f"Scenario {name!r} is registered twice.")
        REGISTRY[name] = Scenario(name=name, title=title, knobs=knobs, needs=needs, run=run)
        return run

    return register


def names() -> list[str]:
    return list(REGISTRY)


def select(only: Iterable[str]) -> list[Scenario]:
    """Return the named scenarios and those they need, in the report's order; raise ValueError on unknown names."""
    wanted = set(only) or set(REGISTRY)
    unknown = wanted - set(REGISTRY)
    if unknown:
        raise ValueError(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    pending = list(wanted)
    while pending:  # the needs of a need count too
        for need in REGISTRY[pending.pop()].needs:
            if need not in wanted:
                wanted.add(need)
                pending.append(need)
    return [spec for name, spec in REGISTRY.items() if name in wanted]
