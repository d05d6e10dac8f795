"""Stored errors carry no secrets and no unbounded text."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings

from reliableq import sanitize
from reliableq.conf import reliableq_settings

SECRET_CASES = [
    # (text, the secret that must vanish, text that must survive)
    ("login failed: password=hunter2", "hunter2", "login failed: password="),
    ("login failed: PASSWORD = hunter2 for user bob", "hunter2", "for user bob"),
    ("token: abc123def456", "abc123def456", "token:"),
    ("upstream said 401 to Authorization: Bearer eyJhbGciOi.payload.sig", "eyJhbGciOi.payload.sig", "Authorization:"),
    ("Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "Authorization:"),
    ("request had header Bearer abc.def-ghi rejected", "abc.def-ghi", "rejected"),
    ('{"password": "hunter2", "user": "bob"}', "hunter2", '"user": "bob"'),
    ("api_key=AKIAxyz123 region=eu", "AKIAxyz123", "region=eu"),
    ("could not connect to https://admin:s3cr3t@db.example.com/app", "s3cr3t", "db.example.com/app"),
    ("postgres://app:p%40ss@db:5432/x refused", "p%40ss", "db:5432/x refused"),
    ("card 4111 1111 1111 1111 declined", "4111 1111 1111 1111", "declined"),
    ("card 4111-1111-1111-1111 declined", "4111-1111-1111-1111", "declined"),
    ("card 4111111111111111 declined", "4111111111111111", "declined"),
    ("stripe rejected sk_live_51HxAbCdEfGh12345678 as revoked", "sk_live_51HxAbCdEfGh12345678", "as revoked"),
    ("used key sk_test_abcdefgh12345678", "sk_test_abcdefgh12345678", "used key"),
    ("Cookie: sessionid=abc123; theme=dark", "abc123", "theme=dark"),
    # Found while writing these tests; each leaked before the fix in reliableq/sanitize.py.
    ("bad config {'password': 'hunter2', 'user': 'bob'}", "hunter2", "'user': 'bob'"),
    ("password: 'correct horse battery staple'", "horse battery staple", "password:"),
    ("GET https://api.example.com/v1/me?access_token=ya29.a0AfH6SM&x=1 failed", "ya29.a0AfH6SM", "x=1 failed"),
    ("refresh_token=1//0gdPlr3 expired", "1//0gdPlr3", "expired"),
    ("env DB_PASSWORD=hunter2 missing", "hunter2", "missing"),
    ("PGPASSWORD=hunter2 psql failed", "hunter2", "psql failed"),
    ("SECRET_KEY=django-insecure-abc123 is weak", "django-insecure-abc123", "is weak"),
    ("aws_secret_access_key=wJalrXUtnFEMIK7MDENGbPxRfiCY", "wJalrXUtnFEMIK7MDENGbPxRfiCY", "aws_secret_access_key"),
    ("redis://:onlypass@cache:6379/0 refused", "onlypass", "cache:6379/0 refused"),
    ("HTTPS://Admin:S3cret@Example.com/ refused", "S3cret", "Example.com/ refused"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), SECRET_CASES, ids=[c[0][:40] for c in SECRET_CASES])
def test_secrets_are_redacted_and_the_rest_is_kept(text: str, secret: str, kept: str) -> None:
    cleaned = sanitize.clean(text)
    assert secret not in cleaned
    assert sanitize.REDACTED in cleaned
    assert kept in cleaned


@pytest.mark.parametrize(
    "text",
    [
        "connection refused on port 5432 after 3 tries",
        "charge service answered 503: upstream unavailable",
        "user 7 no longer exists",
        "tokens used: 12",
        "authority mismatch for example.com",
    ],
)
def test_harmless_text_is_left_alone(text: str) -> None:
    assert sanitize.clean(text) == text


def test_long_errors_are_bounded_to_max_error_chars() -> None:
    text = "x" * 10_000
    with override_settings(RELIABLEQ={"MAX_ERROR_CHARS": 100}):
        assert reliableq_settings.MAX_ERROR_CHARS == 100
        cleaned = sanitize.clean(text)
        assert len(cleaned) <= 100
        assert cleaned.startswith("x" * 50)
        assert "characters cut" in cleaned
    # The setting is read again once the override ends: the conf cache was reloaded.
    with override_settings(RELIABLEQ={"MAX_ERROR_CHARS": 500}):
        cleaned = sanitize.clean(text)
        assert 100 < len(cleaned) <= 500
    assert len(sanitize.clean(text)) <= reliableq_settings.MAX_ERROR_CHARS


def test_short_errors_are_not_cut() -> None:
    with override_settings(RELIABLEQ={"MAX_ERROR_CHARS": 100}):
        assert sanitize.clean("y" * 100) == "y" * 100


def test_cut_marker_counts_the_characters_really_cut() -> None:
    cleaned = sanitize.bound("z" * 1000, 100)
    kept = len(cleaned) - len(cleaned.lstrip("z"))
    assert f"[{1000 - kept} characters cut]" in cleaned


@pytest.mark.parametrize("limit", [0, 1, 10, 25])
def test_bound_holds_even_when_the_limit_is_shorter_than_the_cut_marker(limit: int) -> None:
    assert len(sanitize.bound("x" * 1000, limit)) <= limit


def test_redaction_happens_before_the_cut_so_no_secret_survives_at_the_edge() -> None:
    text = "a" * 80 + " password=hunter2hunter2 " + "b" * 1000
    with override_settings(RELIABLEQ={"MAX_ERROR_CHARS": 100}):
        cleaned = sanitize.clean(text)
    assert "hunter2" not in cleaned
    assert "hunter" not in cleaned
    assert len(cleaned) <= 100


def _raise(exc: BaseException) -> None:
    raise exc


def test_describe_names_the_exception_type_its_message_and_where_it_was_raised() -> None:
    try:
        _raise(ConnectionResetError("peer closed the connection"))
    except ConnectionResetError as exc:
        text = sanitize.describe(exc)
    assert text.startswith("ConnectionResetError: peer closed the connection")
    assert "test_sanitize.py" in text
    assert "_raise" in text


def test_describe_of_an_exception_without_message_is_its_type() -> None:
    try:
        _raise(TimeoutError())
    except TimeoutError as exc:
        text = sanitize.describe(exc)
    assert text.startswith("TimeoutError (at test_sanitize.py:")


def test_describe_of_an_exception_never_raised_is_just_type_and_message() -> None:
    assert sanitize.describe(KeyError("missing")) == "KeyError: 'missing'"


def test_describe_redacts_and_bounds() -> None:
    try:
        _raise(RuntimeError("password=hunter2 " + "q" * 5000))
    except RuntimeError as exc:
        with override_settings(RELIABLEQ={"MAX_ERROR_CHARS": 200}):
            text = sanitize.describe(exc)
    assert "hunter2" not in text
    assert text.startswith("RuntimeError: password=[redacted]")
    assert len(text) <= 200


@pytest.mark.parametrize(
    "text",
    ["a-" * 100_000, "A+" * 100_000, "password" * 25_000 + "=x", "token_" * 30_000, "a://b:" * 30_000],
    ids=["dashed-run", "base64-like-run", "repeated-key", "repeated-prefix", "repeated-scheme"],
)
def test_redaction_stays_linear_on_long_adversarial_text(text: str) -> None:
    # A quadratic pattern takes minutes on 200 kB; a linear one well under a second.
    started = time.perf_counter()
    sanitize.redact(text)
    assert time.perf_counter() - started < 5.0
