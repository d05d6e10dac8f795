"""The CHARGES settings dict (the charges app's own): defaults, lazy access, reload on setting_changed.

CHARGES = {
    "SERVICE_URL": "http://127.0.0.1:8000",  # where the bundled charge job sends charges
    "SERVICE_TOKEN": "",                     # DRF token it sends as Authorization: Token <key>
}
"""

from __future__ import annotations

from typing import Any

from reliableq.conf import AppSettings

SETTING = "CHARGES"

DEFAULTS: dict[str, Any] = {
    "SERVICE_URL": "http://127.0.0.1:8000",  # the charge service's base URL (http or https); never redirected
    "SERVICE_TOKEN": "",  # DRF token the charge job sends as Authorization: Token <key>, to SERVICE_URL only
}


charges_settings = AppSettings(SETTING, DEFAULTS)
