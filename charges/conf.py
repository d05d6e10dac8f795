"""The CHARGES settings dict (the charges app's own): defaults, lazy access, reload on setting_changed.

CHARGES = {
    "SERVICE_URL": "http://127.0.0.1:8000",  # where the bundled charge job sends charges
    "SERVICE_TOKEN": "",                     # DRF token it sends as Authorization: Token <key>
}
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

SETTING = "CHARGES"

DEFAULTS: dict[str, Any] = {
    "SERVICE_URL": "http://127.0.0.1:8000",  # the charge service's base URL (http or https); never redirected
    "SERVICE_TOKEN": "",  # DRF token the charge job sends as Authorization: Token <key>, to SERVICE_URL only
}


class Settings:
    """Read CHARGES keys lazily so that override_settings takes effect at once."""

    _cache: dict[str, Any] | None = None

    def _user(self) -> dict[str, Any]:
        if self._cache is None:
            user = getattr(settings, SETTING, {}) or {}
            if not isinstance(user, dict):
                raise ImproperlyConfigured(f"{SETTING} must be a dict, not {type(user).__name__}.")
            unknown = set(user) - set(DEFAULTS)
            if unknown:
                raise ImproperlyConfigured(
                    f"Unknown {SETTING} setting(s): {', '.join(sorted(unknown))}. "
                    f"Known keys are: {', '.join(DEFAULTS)}."
                )
            self._cache = {**DEFAULTS, **user}
        return self._cache

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"No {SETTING} setting named {name!r}.")
        return self._user()[name]

    def reload(self) -> None:
        self._cache = None


charges_settings = Settings()


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING:
        charges_settings.reload()
