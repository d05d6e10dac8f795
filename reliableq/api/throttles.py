"""Submission throttling: DRF's per-user rate throttle under the scope `reliableq_submit`."""

from __future__ import annotations

from typing import Any

from rest_framework.settings import api_settings
from rest_framework.throttling import UserRateThrottle

SCOPE = "reliableq_submit"
# Used when REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] names no rate for the scope: generous
# for a client, a ceiling for a runaway script or a stolen token.
DEFAULT_RATE = "100/s"


class SubmitThrottle(UserRateThrottle):
    """At most the scope's rate of submissions per user (per IP for anonymous callers, who are refused anyway).

    Counted in fixed windows of the rate's period (one cache increment per request), where DRF's
    own throttle keeps every request's time in the window and rewrites that list each time: at
    100/s that list was a visible part of a submission's cost. A window boundary can let up to
    twice the rate through within one period; the rate still holds over any two periods.

    Counts live in Django's default cache, as for every DRF throttle: with a per-process cache
    (LocMemCache) each server process counts on its own, so set a shared cache (Redis,
    Memcached, the database cache) for a limit that holds across a fleet.
    """

    scope = SCOPE

    def get_rate(self) -> str | None:
        # Read at request time, not import time, so override_settings and reloads take effect.
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        rate = rates.get(self.scope, DEFAULT_RATE)
        return None if rate is None else str(rate)

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        # Set by SimpleRateThrottle.__init__ from the rate (the stubs do not declare them).
        duration: int = self.duration  # type: ignore[attr-defined]
        limit: int = self.num_requests  # type: ignore[attr-defined]
        self.now = self.timer()
        window = int(self.now // duration)
        self.key = f"{key}_{window}"
        # incr() counts this request in its window; the window's first request starts the count
        # with add() (expiring with the window). One cache operation per request but the first.
        try:
            count = self.cache.incr(self.key)
        except ValueError:  # no count yet: a new window (or it expired in between)
            if self.cache.add(self.key, 1, duration + 1):
                count = 1
            else:  # another request started it first
                try:
                    count = self.cache.incr(self.key)
                except ValueError:  # and it expired since: as above
                    self.cache.add(self.key, 1, duration + 1)
                    count = 1
        self.window_end = (window + 1) * duration
        return bool(count <= limit)

    def wait(self) -> float | None:
        """Seconds until the current window ends (the Retry-After header)."""
        return max(0.0, self.window_end - self.now)
