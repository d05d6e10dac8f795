"""The CHARGES settings dict (charges.conf): defaults, reload on override_settings, unknown keys refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from charges.conf import DEFAULTS, charges_settings
from testproject.processes import ROOT


def test_contract_keys_have_the_documented_defaults() -> None:
    assert DEFAULTS == {"SERVICE_URL": "http://127.0.0.1:8000", "SERVICE_TOKEN": ""}


def test_missing_keys_fall_back_to_the_defaults() -> None:
    with override_settings(CHARGES={"SERVICE_TOKEN": "abc"}):
        assert charges_settings.SERVICE_TOKEN == "abc"
        assert DEFAULTS["SERVICE_URL"] == charges_settings.SERVICE_URL
    for empty in ({}, None):
        with override_settings(CHARGES=empty):
            assert (
                DEFAULTS["SERVICE_URL"],
                DEFAULTS["SERVICE_TOKEN"],
            ) == (charges_settings.SERVICE_URL, charges_settings.SERVICE_TOKEN)


def test_override_settings_reloads_the_values() -> None:
    original = charges_settings.SERVICE_URL
    with override_settings(CHARGES={"SERVICE_URL": "http://127.0.0.1:9001"}):
        assert charges_settings.SERVICE_URL == "http://127.0.0.1:9001"
        with override_settings(CHARGES={"SERVICE_URL": "https://charges.example"}):
            assert charges_settings.SERVICE_URL == "https://charges.example"
        assert charges_settings.SERVICE_URL == "http://127.0.0.1:9001"
    assert original == charges_settings.SERVICE_URL


def test_an_unknown_key_is_refused_with_a_clear_message_and_the_closest_key() -> None:
    # The old RELIABLEQ spelling, pasted into CHARGES, is the likely typo.
    with (
        override_settings(CHARGES={"SERVICE_URL": "http://x", "CHARGE_SERVICE_TOKEN": "t", "BOGUS": 1}),
        pytest.raises(ImproperlyConfigured) as raised,
    ):
        charges_settings.SERVICE_URL
    message = str(raised.value)
    assert "Unknown CHARGES setting 'BOGUS'." in message
    assert "Unknown CHARGES setting 'CHARGE_SERVICE_TOKEN'. Did you mean 'SERVICE_TOKEN'?" in message
    assert isinstance(charges_settings.SERVICE_URL, str)  # and it works again once the bad override ends


def test_settings_that_are_not_a_dict_are_refused() -> None:
    with (
        override_settings(CHARGES=["SERVICE_URL"]),
        pytest.raises(ImproperlyConfigured, match="CHARGES must be a dict"),
    ):
        charges_settings.SERVICE_URL


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="No CHARGES setting named 'URL'"):
        charges_settings.URL


def test_testproject_builds_charges_from_charges_env_vars() -> None:
    """The demo and the tests hand a worker its service as CHARGES_SERVICE_URL / CHARGES_SERVICE_TOKEN."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELIABLEQ_", "CHARGES_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="testproject.settings",
        DATABASE_URL="postgres://nobody@127.0.0.1:9/unused",  # never connected: only settings are read
        CHARGES_SERVICE_URL="http://127.0.0.1:8123",
        CHARGES_SERVICE_TOKEN="tok-1",
    )
    code = "import django; django.setup(); from django.conf import settings; print(settings.CHARGES)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr({"SERVICE_URL": "http://127.0.0.1:8123", "SERVICE_TOKEN": "tok-1"})
