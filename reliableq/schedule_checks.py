"""System checks of the schedules code declares: each names a kind some handler registers
(reliableq.E010), and no name is declared both by reliableq.schedule and by a cron handler (E011).

Here and not when reliableq.schedule is called: another app's jobs.py may register the kind later.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from . import registry


@checks.register()
def check_declared_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from .conf import reliableq_settings
    from .schedules import conflicts, declared

    if reliableq_settings.unknown():  # the settings cannot be read: reliableq.E006 says why
        return []
    errors: list[checks.CheckMessage] = []
    for spec in declared().values():
        try:
            registry.get(spec.kind)
        except registry.UnknownKind as exc:
            errors.append(
                checks.Error(
                    f"Schedule {spec.name!r} makes jobs of kind {spec.kind!r}, which no handler registers. {exc}",
                    hint="Register a handler for the kind in an installed app's jobs.py, or fix the schedule's kind.",
                    id="reliableq.E010",
                )
            )
    for name in conflicts():
        errors.append(
            checks.Error(
                f"Schedule {name!r} is declared twice: by reliableq.schedule and by @handler({name!r}, cron=...).",
                hint="Keep one: a handler's cron is a schedule named after its kind.",
                id="reliableq.E011",
            )
        )
    return errors
