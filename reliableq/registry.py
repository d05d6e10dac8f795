"""The handler registry, filled by @handler in each installed app's jobs.py."""

from __future__ import annotations

import datetime as dt
import difflib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .cron import next_slot
from .errors import NotSubmittable as NotSubmittable  # re-exported: callers catch registry.NotSubmittable
from .errors import UnknownKind as UnknownKind

HandlerFunc = Callable[[Any], Any]
_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
MAX_RATE = 1_000_000  # starts per window; more is no limit worth a lock


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` starts of a kind in any window of `seconds`, fleet-wide."""

    count: int
    seconds: float

    @classmethod
    def parse(cls, text: str) -> Rate:
        """ "10/s", "100/m", "5000/h" -> Rate; ValueError naming the form otherwise."""
        number, _, unit = str(text).strip().partition("/")
        if not number.isdigit() or unit not in _RATE_UNITS or not 1 <= int(number) <= MAX_RATE:
            raise ValueError(
                f"rate_limit must look like '10/s', '100/m' or '5000/h' (1 to {MAX_RATE:,}); got {text!r}."
            )
        return cls(int(number), _RATE_UNITS[unit])

    def __str__(self) -> str:
        unit = {v: k for k, v in _RATE_UNITS.items()}[self.seconds]
        return f"{self.count}/{unit}"


@dataclass(frozen=True, slots=True)
class Limits:
    """What a claim must respect for one kind, fleet-wide (see reliableq.jobqueue.claim)."""

    max_running: int | None = None  # RUNNING jobs of the kind
    per_key: int | None = None  # RUNNING jobs of the kind with one concurrency_key
    rate: Rate | None = None  # starts of the kind per window
    fair: bool = False  # claims take the kind's due jobs in turn among fair_keys (not a limit on how many)

    @property
    def limited(self) -> bool:
        """Whether the kind's claims count something fleet-wide (a cap, a key's share, a rate)."""
        return bool(self.max_running or self.per_key or self.rate)


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
    max_running_per_key: int | None = None  # fleet-wide cap per concurrency_key
    rate_limit: Rate | None = None  # fleet-wide starts per window
    isolation: str | None = None  # "thread" or "process"; None: RELIABLEQ["ISOLATION"] (async ones: the loop)
    fair: bool = False  # claims rotate among the jobs' fair_keys

    @property
    def is_async(self) -> bool:
        """An `async def` handler: awaited on the worker's event loop (or in its child, under process isolation)."""
        return inspect.iscoroutinefunction(self.func)

    @property
    def runs_in(self) -> str:
        """Where an attempt runs: "process" (a child), "async" (the worker's event loop) or "thread"."""
        from .conf import reliableq_settings

        if self.isolation == "process" or (
            self.isolation is None and not self.is_async and reliableq_settings.ISOLATION == "process"
        ):
            return "process"
        return "async" if self.is_async else "thread"

    @property
    def limits(self) -> Limits | None:
        if not (self.max_running or self.max_running_per_key or self.rate_limit or self.fair):
            return None
        return Limits(
            max_running=self.max_running, per_key=self.max_running_per_key, rate=self.rate_limit, fair=self.fair
        )


_handlers: dict[str, Handler] = {}
_imported: list[str] | None = None  # the jobs (and tasks) modules autodiscover() imported; None: not run
ISOLATIONS = (None, "thread", "process")


def handler(
    kind: str,
    *,
    max_attempts: int | None = None,
    timeout: float | None = None,
    max_running: int | None = None,
    cron: str | None = None,
    keep_return: bool = False,
    http: bool = False,
    max_running_per_key: int | None = None,
    rate_limit: str | None = None,
    isolation: str | None = None,
    keep_result: bool = False,
    fair: bool = False,
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Register the decorated function as the handler of `kind`.

    `keep_result=True` stores the handler's return value (job.result); `keep_return` is its older name.
    `fair=True` shares the kind's claims among its jobs' fair_keys, round robin.
    """
    keep_return = keep_return or keep_result
    if not kind or len(kind) > 200:
        raise ValueError("A handler kind must be a non-empty string of at most 200 characters.")
    if max_attempts is not None and max_attempts < 1:
        raise ValueError("max_attempts must be at least 1.")
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds.")
    if max_running is not None and max_running < 1:
        raise ValueError("max_running must be at least 1.")
    if max_running_per_key is not None and max_running_per_key < 1:
        raise ValueError("max_running_per_key must be at least 1.")
    rate = Rate.parse(rate_limit) if rate_limit is not None else None
    if isolation not in ISOLATIONS:
        raise ValueError(
            f"isolation must be 'thread' or 'process' (or left out for RELIABLEQ['ISOLATION']); got {isolation!r}."
        )
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
            max_running_per_key=max_running_per_key,
            rate_limit=rate,
            isolation=isolation,
            fair=bool(fair),
        )
        return func

    return register


def get(kind: str) -> Handler:
    try:
        return _handlers[kind]
    except KeyError:
        raise unknown(kind) from None


def unknown(kind: str, *, where: str = "") -> UnknownKind:
    """The UnknownKind for `kind` (`where`: " on worker w"): the closest kinds, and where handlers come from."""
    return UnknownKind(f"No handler is registered for kind {kind!r}{where}.{did_you_mean(kind)} {discovery()}")


def discovery() -> str:
    """Where handlers are found, and which of those modules this process imported."""
    if _imported is None:
        return "Handlers are found in each installed app's jobs.py, imported when Django starts (not yet here)."
    imported = ", ".join(_imported) or "none"
    return (
        f"Handlers are found in each installed app's jobs.py (imported here: {imported}); "
        "a handler in another module registers only once a jobs.py imports that module."
    )


def handler_of(kind: str, attribute: str) -> Any:
    """An attribute of a kind's handler, or None for a kind no app registered (its error comes later)."""
    found = _handlers.get(kind)
    return None if found is None else getattr(found, attribute)


def did_you_mean(kind: str) -> str:
    """ " Did you mean 'a' or 'b'?" for the registered kinds closest to `kind` (empty when none is close).

    For code's errors only: the HTTP API answers an unknown kind without naming any (for_http)."""
    close = difflib.get_close_matches(kind, list(_handlers), n=3, cutoff=0.6)
    if not close:
        return ""
    names = " or ".join(repr(k) for k in close)
    return f" Did you mean {names}?"


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


def limits() -> dict[str, Limits]:
    """Kinds whose claims are limited (max_running, max_running_per_key, rate_limit) or fair, and how."""
    return {kind: h.limits for kind, h in _handlers.items() if h.limits is not None}


def crons() -> dict[str, str]:
    """Kinds with a cron schedule, and that schedule."""
    return {kind: h.cron for kind, h in _handlers.items() if h.cron}


def kinds() -> list[str]:
    return sorted(_handlers)


def isolation() -> str:
    """Where this process's handlers run: "thread", "process" or "async" when all alike, else "per handler"."""
    found = {h.runs_in for h in _handlers.values()}
    if len(found) == 1:
        return found.pop()
    return "per handler" if found else ""  # no handler registered: it runs nothing


def autodiscover() -> None:
    """Import every installed app's jobs module, as the admin does with admin.py.

    Where the ReliableQ Tasks backend is configured, import every app's tasks module too: a
    worker runs only the tasks its process has registered, never a path read from a payload.
    """
    from django.apps import apps
    from django.conf import settings
    from django.utils.module_loading import autodiscover_modules

    global _imported
    autodiscover_modules("jobs")
    names = ["jobs"]
    backends = getattr(settings, "TASKS", {}) or {}
    if any(options.get("BACKEND") == TASKS_BACKEND for options in backends.values()):
        autodiscover_modules("tasks")
        names.append("tasks")
    # Kept for UnknownKind's message: a handler outside these modules is the usual reason for one.
    modules = (f"{app.name}.{name}" for app in apps.get_app_configs() for name in names)
    _imported = [module for module in modules if module in sys.modules]
