"""Submission throttling: DRF's per-user rate throttle under the scope `reliableq_submit`."""

from __future__ import annotations

from typing import Any

from rest_framework.settings import api_settings
from rest_framework.throttling import UserRateThrottle

SCOPE = "reliableq_submit"
# Used when REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] names no rate for the scope. It counts jobs, not
# requests (a batch of N counts N): generous for a client, and one full batch (1,000) fits a
# window; a ceiling for a runaway script or a stolen token.
DEFAULT_RATE = "6000/m"


class WindowThrottle(UserRateThrottle):
    """A per-user rate in fixed windows of the rate's period, each request counting one.

    Counted in fixed windows (one cache increment per request), where DRF's own throttle keeps
    every request's time in the window and rewrites that list each time: at 100/s that list was a
    visible part of a submission's cost. A window boundary can let up to twice the rate through
    within one period; the rate still holds over any two periods.

    Counts live in Django's default cache, as for every DRF throttle: with a per-process cache
    (LocMemCache) each server process counts on its own, so set a shared cache (Redis,
    Memcached, the database cache) for a limit that holds across a fleet.
    """

    default_rate = ""
    over_rate = False  # the last charge was larger than a whole window allows

    def get_rate(self) -> str | None:
        # Read at request time, not import time, so override_settings and reloads take effect.
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        rate = rates.get(str(self.scope), self.default_rate)
        return None if rate is None else str(rate)

    def _window(self, request: Any, view: Any) -> str | None:
        """The cache key of the current window for this caller (None: not throttled)."""
        if self.rate is None:
            return None
        key = self.get_cache_key(request, view)
        if key is None:
            return None
        # duration and num_requests are set from the rate by SimpleRateThrottle (the stubs do not declare them).
        duration: int = self.duration  # type: ignore[attr-defined]
        self.now = self.timer()
        window = int(self.now // duration)
        self.window_end = (window + 1) * duration
        self.key = f"{key}_{window}"
        return self.key

    def allow_request(self, request: Any, view: Any) -> bool:
        return self.charge(request, view, 1)

    def charge(self, request: Any, view: Any, cost: int) -> bool:
        """Count `cost` against this window if it fits; False (and nothing counted) if not."""
        key = self._window(request, view)
        if key is None:
            return True
        duration: int = self.duration  # type: ignore[attr-defined]
        limit: int = self.num_requests  # type: ignore[attr-defined]
        self.over_rate = cost > limit
        if self.over_rate:
            return False  # no window will ever admit it: nothing to count
        # incr() counts in the window; the window's first request starts the count with add()
        # (expiring with the window). One cache operation per request but the first.
        try:
            count = self.cache.incr(key, cost)
        except ValueError:  # no count yet: a new window (or it expired in between)
            if self.cache.add(key, cost, duration + 1):
                count = cost
            else:  # another request started it first
                try:
                    count = self.cache.incr(key, cost)
                except ValueError:  # and it expired since: as above
                    self.cache.add(key, cost, duration + 1)
                    count = cost
        if count <= limit:
            return True
        try:
            self.cache.decr(key, cost)  # refused whole: give the window its room back
        except ValueError:
            pass
        return False

    def wait(self) -> float | None:
        """Seconds until the current window ends (the Retry-After header)."""
        return max(0.0, self.window_end - self.now)


class SubmitThrottle(WindowThrottle):
    """At most the scope's rate of submitted jobs per user, a batch of N counting N.

    DRF's check before the view (allow_request) only asks whether the window has room left; the
    view then charges the jobs it is about to store (charge()), once it knows how many. A charge
    that does not fit is refused whole and counts nothing.
    """

    scope = SCOPE
    default_rate = DEFAULT_RATE

    def allow_request(self, request: Any, view: Any) -> bool:
        """Whether this window has room for one more job; nothing is counted here."""
        key = self._window(request, view)
        if key is None:
            return True
        limit: int = self.num_requests  # type: ignore[attr-defined]
        return int(self.cache.get(key, 0)) < limit


class ReadThrottle(WindowThrottle):
    """Reads that cost the database a scan (metrics, stats, the queues), per user, scope `reliableq_read`."""

    scope = "reliableq_read"
    default_rate = "600/m"
