"""The handler registry, filled by @handler in each installed app's jobs.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .cron import next_slot
from .errors import NotSubmittable, UnknownKind

HandlerFunc = Callable[[Any], Any]
# Django Tasks run as `django.task` (jobs made before tasks had kinds of their own) and as
# `django.task:<module path>`: never submittable over HTTP, whatever a handler says.
TASKS_KIND = "django.task"
TASKS_BACKEND = "reliableq.backends.ReliableQBackend"


@dataclass(frozen=True, slots=True, kw_only=True)
class Handler:
    kind: str
    func: HandlerFunc
    max_attempts: int | None = None  # None: RELIABLEQ["MAX_ATTEMPTS"]
    timeout: float | None = None  # None: RELIABLEQ["HANDLER_TIMEOUT_SECONDS"]
    max_running: int | None = None  # fleet-wide cap for the kind
    cron: str | None = None  # periodic schedule
    keep_return: bool = False  # store the return value, fenced with the finish (Tasks backend)
    http: bool = False  # POST /v1/jobs may submit this kind (users holding reliableq.submit_job)


_handlers: dict[str, Handler] = {}


def handler(
    kind: str,
    *,
    max_attempts: int | None = None,
    timeout: float | None = None,
    max_running: int | None = None,
    cron: str | None = None,
    keep_return: bool = False,
    http: bool = False,
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
    if http and is_task_kind(kind):
        raise ValueError(f"Kind {kind!r} runs Django Tasks, which are never submittable over HTTP.")
    if cron is not None:
        next_slot(cron, dt.datetime.now(dt.timezone.utc))  # a bad expression fails at import of jobs.py, not at 3 a.m.

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
            http=http,
        )
        return func

    return register


def get(kind: str) -> Handler:
    try:
        return _handlers[kind]
    except KeyError:
        raise UnknownKind(f"No handler is registered for kind {kind!r}.") from None


def is_task_kind(kind: str) -> bool:
    return kind == TASKS_KIND or kind.startswith(TASKS_KIND + ":")


def for_http(kind: str) -> Handler:
    """The handler of a kind that POST /v1/jobs may submit; else NotSubmittable, naming no other kind.

    An unknown kind and a kind that did not opt in get the same answer, so the API never
    tells a caller which kinds exist.
    """
    found = _handlers.get(kind)
    if found is None or not found.http or is_task_kind(kind):
        raise NotSubmittable(f"Kind {kind!r} cannot be submitted over HTTP.")
    return found


def caps() -> dict[str, int]:
    """Kinds with a fleet-wide max_running, and that cap."""
    return {kind: h.max_running for kind, h in _handlers.items() if h.max_running}


def crons() -> dict[str, str]:
    """Kinds with a cron schedule, and that schedule."""
    return {kind: h.cron for kind, h in _handlers.items() if h.cron}


def kinds() -> list[str]:
    return sorted(_handlers)


def autodiscover() -> None:
    """Import every installed app's jobs module, as the admin does with admin.py.

    Where the ReliableQ Tasks backend is configured, import every app's tasks module too: a
    worker runs only the tasks its process has registered, never a path read from a payload.
    """
    from django.conf import settings
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("jobs")
    backends = getattr(settings, "TASKS", {}) or {}
    if any(options.get("BACKEND") == TASKS_BACKEND for options in backends.values()):
        autodiscover_modules("tasks")


def http_kinds() -> list[str]:
    """Kinds that POST /v1/jobs accepts."""
    return sorted(kind for kind, h in _handlers.items() if h.http and not is_task_kind(kind))
