"""testproject without the bundled charges app: proves reliableq stands alone (tests/test_boundaries.py)."""

from .settings import *  # noqa: F403

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "charges"]  # noqa: F405
ROOT_URLCONF = "testproject.urls_without_charges"
