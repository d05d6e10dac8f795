"""The RELIABLEQ settings dict: defaults, lazy access, reload on setting_changed."""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    "LEASE_SECONDS": 30.0,  # lease length; the heartbeat renews every LEASE_SECONDS / 3
    "MAX_ATTEMPTS": 5,  # default budget per job, counted at claim
    "BACKOFF_BASE_SECONDS": 5.0,  # cap(n) = min(MAX, BASE * 2**(n-1))
    "BACKOFF_MAX_SECONDS": 3600.0,  # the cap of the cap
    "HANDLER_TIMEOUT_SECONDS": 60.0,  # default per-handler wall-clock limit
    "MAX_PAYLOAD_BYTES": 65536,  # a job's payload as compact JSON may be at most this long
    "MAX_SCHEDULE_SECONDS": 365 * 86400.0,  # run_at may be at most this far ahead; a past run_at means now
    "FAULT_INJECTION": False,  # honour RELIABLEQ_CRASH_AT; only tests and the demo turn this on
    "POLL_SECONDS": 1.0,  # how long an idle worker waits before looking for due jobs again
    "LISTEN_NOTIFY": True,  # wake idle workers on enqueue with LISTEN/NOTIFY (polling stays the safety net)
    "DATABASE": "default",  # the database alias that holds the queue's tables
    "LISTEN_DATABASE": None,  # alias for LISTEN: a direct connection, not a transaction pooler; None: DATABASE
    "SCHEDULE_SECONDS": 5.0,  # how often the maintenance leader looks for new and changed schedules
    "MAX_SNOOZES": 100,  # a job snoozed this often counts its next Snooze as a failure
    "MAX_ERROR_CHARS": 2000,  # stored errors are cut to this length
    "XMIN_WARNING_SECONDS": 300.0,  # the dashboard warns when a snapshot older than this holds back vacuum
    # Finished jobs older than this (per status; None keeps them) are deleted by the maintenance leader.
    "RETENTION_SECONDS": {"SUCCEEDED": 86400, "CANCELLED": 86400, "DEAD": 2592000, "EVENT": 2592000},
    "RETENTION_INTERVAL_SECONDS": 60.0,  # how often the leader deletes a batch of each status
    # The queues an HTTP submitter may name (POST /v1/jobs and the batch); ["*"] allows any well-formed name.
    "HTTP_QUEUES": ["default"],
    # The event names POST /v1/events/<name> may emit: shell-style patterns ("stripe.*"); ["*"] opens every
    # name, [] (the default) none.
    "HTTP_EVENTS": [],
    # The most unfinished jobs one HTTP submitter may hold at once (429 past it); None: no bound.
    "MAX_PENDING_PER_SUBMITTER": 100_000,
    # Where sync handlers' attempts run unless the handler says: "thread" (the worker's threads) or "process".
    "ISOLATION": "thread",
    # Under process isolation, a child is replaced after this many attempts (None: never) ...
    "CHILD_MAX_JOBS": None,
    # ... or once its resident memory after an attempt is over this many MB (None: never).
    "CHILD_MAX_MEMORY_MB": None,
    # /v1/metrics and the dashboard's figures are computed at most this often per process (0: every time).
    "STATS_CACHE_SECONDS": 5.0,
    # A fair kind's share per fair_key: {key: weight}, 1 for a key not named (a key of weight 2 takes two
    # turns to another's one). Read when a job is enqueued: a change applies to jobs enqueued after it.
    "FAIR_WEIGHTS": {},
}


class AppSettings:
    """One settings dict of an app (RELIABLEQ, CHARGES): defaults, lazy reads, reload on setting_changed.

    Read lazily so that override_settings takes effect at once; an unknown key, or a value that
    is not a dict, is an error at the first read (and a system check error), naming the closest keys.
    """

    _instances: dict[str, AppSettings] = {}

    def __init__(self, name: str, defaults: dict[str, Any]) -> None:
        self._name = name
        self._defaults = defaults
        self._cache: dict[str, Any] | None = None
        AppSettings._instances[name] = self

    def _user(self) -> dict[str, Any]:
        if self._cache is None:
            user = getattr(settings, self._name, {}) or {}
            if not isinstance(user, dict):
                raise ImproperlyConfigured(f"{self._name} must be a dict, not {type(user).__name__}.")
            unknown = self.unknown()
            if unknown:
                raise ImproperlyConfigured(" ".join(unknown))
            self._cache = {**self._defaults, **user}
        return self._cache

    def unknown(self) -> list[str]:
        """A sentence for each key of the user's dict that is not a setting, naming the closest one."""
        user = getattr(settings, self._name, {}) or {}
        if not isinstance(user, dict):
            return []  # said by _user(): the dict itself is wrong
        found = []
        for key in sorted(set(user) - set(self._defaults), key=str):
            close = difflib.get_close_matches(str(key), list(self._defaults), n=1, cutoff=0.6)
            guess = f" Did you mean {close[0]!r}?" if close else ""
            found.append(f"Unknown {self._name} setting {key!r}.{guess}")
        return found

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._defaults:
            raise AttributeError(f"No {self._name} setting named {name!r}.")
        value = self._user()[name]
        # Kept as an attribute: the next read is a plain one, not this method (the worker reads some
        # settings for every job). reload() drops them.
        self.__dict__[name] = value
        return value

    def reload(self) -> None:
        self._cache = None
        for name in self._defaults:
            self.__dict__.pop(name, None)


reliableq_settings = AppSettings("RELIABLEQ", DEFAULTS)


def queue_alias() -> str:
    """The alias of the database that holds the queue's tables (read on each call: override_settings)."""
    return str(reliableq_settings.DATABASE)


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    found = AppSettings._instances.get(setting)
    if found is not None:
        found.reload()
