"""The RELIABLEQ settings dict: defaults, refusal of unknown keys, reload on override_settings."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from reliableq.conf import DEFAULTS, reliableq_settings


def test_unknown_key_is_refused_with_a_clear_message() -> None:
    with (
        override_settings(RELIABLEQ={"LEASE_SECONDS": 10, "LEASE_SECOND": 10, "BOGUS": 1}),
        pytest.raises(ImproperlyConfigured) as raised,
    ):
        reliableq_settings.LEASE_SECONDS
    message = str(raised.value)
    # Each key with the closest known one, not a list of all 25 (issue 50).
    typo = "Unknown RELIABLEQ setting 'LEASE_SECOND'. Did you mean 'LEASE_SECONDS'?"
    assert message == "Unknown RELIABLEQ setting 'BOGUS'. " + typo


def test_an_unknown_key_is_a_system_check_error_naming_the_closest_key_not_a_traceback() -> None:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    # Before: every check that read a setting raised ImproperlyConfigured out of `manage.py check`.
    with (
        override_settings(RELIABLEQ={"MAX_ATTEMPT": 3}),
        pytest.raises(SystemCheckError) as raised,
    ):
        call_command("check")
    message = str(raised.value)
    assert "reliableq.E006" in message
    assert "Unknown RELIABLEQ setting 'MAX_ATTEMPT'. Did you mean 'MAX_ATTEMPTS'?" in message
    assert "LEASE_SECONDS" not in message


def test_settings_work_again_after_a_bad_override_ends() -> None:
    with (
        override_settings(RELIABLEQ={"BOGUS": 1}),
        pytest.raises(ImproperlyConfigured),
    ):
        reliableq_settings.MAX_ATTEMPTS
    assert isinstance(reliableq_settings.MAX_ATTEMPTS, int)


def test_override_settings_reloads_the_values() -> None:
    original = reliableq_settings.LEASE_SECONDS
    with override_settings(RELIABLEQ={"LEASE_SECONDS": 7.5}):
        assert reliableq_settings.LEASE_SECONDS == 7.5
        with override_settings(RELIABLEQ={"LEASE_SECONDS": 3}):
            assert reliableq_settings.LEASE_SECONDS == 3
        assert reliableq_settings.LEASE_SECONDS == 7.5
    assert original == reliableq_settings.LEASE_SECONDS


def test_missing_keys_fall_back_to_the_defaults() -> None:
    with override_settings(RELIABLEQ={"MAX_ATTEMPTS": 9}):
        assert reliableq_settings.MAX_ATTEMPTS == 9
        for key, default in DEFAULTS.items():
            if key != "MAX_ATTEMPTS":
                assert getattr(reliableq_settings, key) == default
    with override_settings(RELIABLEQ=None):
        assert DEFAULTS["MAX_ATTEMPTS"] == reliableq_settings.MAX_ATTEMPTS


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="No RELIABLEQ setting named 'NOPE'"):
        reliableq_settings.NOPE


def test_contract_keys_have_the_documented_defaults() -> None:
    assert DEFAULTS["LEASE_SECONDS"] == 30
    assert DEFAULTS["MAX_ATTEMPTS"] == 5
    assert DEFAULTS["BACKOFF_BASE_SECONDS"] == 5
    assert DEFAULTS["BACKOFF_MAX_SECONDS"] == 3600
    assert DEFAULTS["HANDLER_TIMEOUT_SECONDS"] == 60
    assert DEFAULTS["MAX_PAYLOAD_BYTES"] == 65536
    assert DEFAULTS["FAULT_INJECTION"] is False


def test_the_charge_service_keys_are_not_reliableq_settings() -> None:
    """reliableq names nothing of the charges app: its keys live in CHARGES (charges.conf)."""
    assert not {"CHARGE_SERVICE_URL", "CHARGE_SERVICE_TOKEN"} & set(DEFAULTS)
    with (
        override_settings(RELIABLEQ={"CHARGE_SERVICE_URL": "http://127.0.0.1:8000"}),
        pytest.raises(ImproperlyConfigured, match="Unknown RELIABLEQ setting"),
    ):
        reliableq_settings.LEASE_SECONDS
