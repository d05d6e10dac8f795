"""What the browser tests share: Debian's chromium driven by Playwright, and where screenshots go.

Without chromium or playwright a browser test is skipped, except under CI (CI set), where it
fails: .ci/run installs chromium first.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support import ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / "artifacts"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def load_playwright() -> Any:
    """playwright.sync_api, or a skip (a failure under CI) when it or chromium is missing."""
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        import playwright.sync_api as api
    except ImportError:
        api = None
        missing.append("the playwright package is not installed (pip install -e '.[dev]')")
    if missing:
        reason = "browser test: " + "; ".join(missing)
        if in_ci():
            pytest.fail(reason + " -- CI must run this test, not skip it", pytrace=False)
        pytest.skip(reason)
    return api
