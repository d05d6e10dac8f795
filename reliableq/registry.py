"""The handler registry, filled by @handler in each installed app's jobs.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import UnknownKind

HandlerFunc = Callable[[Any], Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Handler:
    kind: str
    func: HandlerFunc
    max_attempts: int | None = None  # None: RELIABLEQ["MAX_ATTEMPTS"]
    timeout: float | None = None  # None: RELIABLEQ["HANDLER_TIMEOUT_SECONDS"]
    max_running: int | None = None  # fleet-wide cap for the kind
    cron: str | None = None  # periodic schedule
    keep_return: bool = False  # store the return value, fenced with the finish (Tasks backend)


_handlers: dict[str, Handler] = {}


def handler(
    kind: str,
    *,
    max_attempts: int | None = None,
    timeout: float | None = None,
    max_running: int | None = None,
    cron: str | None = None,
    keep_return: bool = False,
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Register the decorated function as the handler of `kind`."""
    if not kind or len(kind) > 200:
        raise ValueError("A handler kind must be a non-empty string of at most 200 characters.")
    if max_attempts is not None and max_attempts < 1:
        raise ValueError("max_attempts must be at least 1.")
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds.")
    if max_running is not None and max_running < 1:
        raise ValueError("max_running must be at least 1.")
    if cron is not None:
        from .scheduler import next_slot  # a bad expression fails at import of jobs.py, not at 3 a.m.

        next_slot(cron, dt.datetime.now(dt.timezone.utc))

    def register(func: HandlerFunc) -> HandlerFunc:
        existing = _handlers.get(kind)
        if existing is not None and existing.func is not func:
            qualname = f"{existing.func.__module__}.{existing.func.__qualname__}"
            raise ValueError(f"Kind {kind!r} already has a handler: {qualname}.")
        _handlers[kind] = Handler(
            kind=kind,
            func=func,
            max_attempts=max_attempts,
            timeout=timeout,
            max_running=max_running,
            cron=cron,
            keep_return=keep_return,
        )
        return func

    return register


def get(kind: str) -> Handler:
    try:
        return _handlers[kind]
    except KeyError:
        raise UnknownKind(f"No handler is registered for kind {kind!r}.") from None


def caps() -> dict[str, int]:
    """Kinds with a fleet-wide max_running, and that cap."""
    return {kind: h.max_running for kind, h in _handlers.items() if h.max_running}


def crons() -> dict[str, str]:
    """Kinds with a cron schedule, and that schedule."""
    return {kind: h.cron for kind, h in _handlers.items() if h.cron}


def kinds() -> list[str]:
    return sorted(_handlers)


def autodiscover() -> None:
    """Import every installed app's jobs module, as the admin does with admin.py."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("jobs")
