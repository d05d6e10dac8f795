"""Submission throttling: DRF's per-user rate throttle under the scope `reliableq_submit`."""

from __future__ import annotations

from rest_framework.settings import api_settings
from rest_framework.throttling import UserRateThrottle

SCOPE = "reliableq_submit"
# Used when REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] names no rate for the scope: generous
# for a client, a ceiling for a runaway script or a stolen token.
DEFAULT_RATE = "100/s"


class SubmitThrottle(UserRateThrottle):
    """At most the scope's rate of submissions per user (per IP for anonymous callers, who are refused anyway).

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
