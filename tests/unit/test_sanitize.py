"""Stored errors carry no secrets and no unbounded text."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

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
    (
        "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
        "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
        "Authorization:",
    ),
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
    # A quadratic pattern takes minutes on 200 kB; a linear one well under a second (of CPU time).
    started = time.thread_time()
    sanitize.redact(text)
    assert time.thread_time() - started < 5.0


# --- Gaps found by the security review; each case leaked before the fix in reliableq/sanitize.py. ---

KEY_NAME_CASES = [
    # (text, the secret that must vanish, text that must survive)
    ("deploy failed: private_key=MIIEowIBAAKCAQEA7x", "MIIEowIBAAKCAQEA7x", "deploy failed: private_key="),
    ("PRIVATE_KEY: MIIEpAIBAAKCAQEAx9 not loaded", "MIIEpAIBAAKCAQEAx9", "not loaded"),
    ("env SSH_PRIVATE_KEY=AAAAB3NzaC1yc2E missing", "AAAAB3NzaC1yc2E", "env SSH_PRIVATE_KEY="),
    ("gpg: passphrase=Tr0ub4dor3 rejected", "Tr0ub4dor3", "rejected"),
    ('{"passphrase": "open sesame 42", "user": "bob"}', "sesame", '"user": "bob"'),
    ("credentials=alice:wonderland42 refused", "wonderland42", "refused"),
    ("db_credentials=s3cr3t-pair; retry", "s3cr3t-pair", "retry"),
    ("bad config {'credentials': 'xyzzy-42', 'host': 'db'}", "xyzzy-42", "'host': 'db'"),
    ('{"private_key_id": "9f8e7d6c5b4a", "type": "service_account"}', "9f8e7d6c5b4a", '"type": "service_account"'),
    # A PEM block: a label-and-value rule would stop at the line break and keep the key's body.
    (
        "PRIVATE_KEY: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x\nq9Zt3w==\n"
        "-----END RSA PRIVATE KEY-----\nthen failed",
        "q9Zt3w==",
        "then failed",
    ),
    (
        "cannot parse -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n"
        "-----END OPENSSH PRIVATE KEY----- as ed25519",
        "b3BlbnNzaC1rZXk",
        "as ed25519",
    ),
    # Cut by bound() or by the sender before its END line: redacted to the end of the text.
    ("key was -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "MIIEvQIBADANBgkq", "key was"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), KEY_NAME_CASES, ids=[c[0][:40] for c in KEY_NAME_CASES])
def test_private_keys_passphrases_and_credentials_are_redacted(text: str, secret: str, kept: str) -> None:
    cleaned = sanitize.clean(text)
    assert secret not in cleaned
    assert sanitize.REDACTED in cleaned
    assert kept in cleaned


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc123_-XYZ"

JWT_CASES = [
    (f"session rejected: {JWT} expired", JWT, "session rejected: "),
    (f"callback /auth?state={JWT}&step=2 failed", "eyJzdWIiOiIxIn0", "&step=2 failed"),
    (f'{{"assertion": "{JWT}", "aud": "api"}}', "eyJzdWIiOiIxIn0", '"aud": "api"'),
    # An unsigned token (alg none) has an empty third segment; its payload is still readable.
    ("got (eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.) from peer", "eyJzdWIiOiIxIn0", "from peer"),
    # A compact JWE has five segments, the second empty with direct encryption.
    ("cannot decrypt eyJhbGciOiJkaXIifQ..aXY.Y2lwaGVy.dGFn now", "Y2lwaGVy", " now"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), JWT_CASES, ids=[c[0][:40] for c in JWT_CASES])
def test_bare_jwts_are_redacted_anywhere(text: str, secret: str, kept: str) -> None:
    cleaned = sanitize.clean(text)
    assert secret not in cleaned
    assert "eyJ" not in cleaned
    assert kept in cleaned


def test_a_jwt_ending_a_sentence_keeps_the_full_stop() -> None:
    assert sanitize.clean(f"token {JWT}.") == "token [redacted]."


BASIC_CASES = [
    ("request failed with Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "request failed with Basic "),
    ("upstream rejected basic YWxhZGRpbjpvcGVuc2VzYW1l (401)", "YWxhZGRpbjpvcGVuc2VzYW1l", "(401)"),
    ("sent Basic Ym9iOmh1bnRlcjI= to proxy", "Ym9iOmh1bnRlcjI=", "to proxy"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), BASIC_CASES, ids=[c[0][:40] for c in BASIC_CASES])
def test_basic_credentials_without_a_label_are_redacted(text: str, secret: str, kept: str) -> None:
    cleaned = sanitize.clean(text)
    assert secret not in cleaned
    assert sanitize.REDACTED in cleaned
    assert kept in cleaned


@pytest.mark.parametrize(
    "text",
    [
        "basic auth is not configured for this queue",
        "server wants Basic realm=api",
        "fell back to Basic authentication",
        "credentials were rotated",
        "private key file missing",
        "passphrase prompt skipped",
        "eyJ is how base64 JSON starts",
    ],
)
def test_new_patterns_leave_harmless_text_alone(text: str) -> None:
    assert sanitize.clean(text) == text


UNQUOTED_CASES = [
    # (text, exactly what must be stored)
    ("password=p@ss w0rd", "password=[redacted]"),
    ("password=x user=bob", "password=[redacted] user=bob"),
    ("password: p@ss w0rd, user: bob", "password: [redacted], user: bob"),
    ("token=abc d3f ghi", "token=[redacted] ghi"),
    ("api_key=k3y 2nd-part region:eu", "api_key=[redacted] region:eu"),
    ("password=p@ss w0rd\nnext line", "password=[redacted]\nnext line"),
    ("password=p@ss w0rd (at tasks.py:3 in run)", "password=[redacted] (at tasks.py:3 in run)"),
    ("secret=abc 12:30 https://example.com/x failed", "secret=[redacted] https://example.com/x failed"),
]


@pytest.mark.parametrize(("text", "expected"), UNQUOTED_CASES, ids=[c[0][:40] for c in UNQUOTED_CASES])
def test_an_unquoted_value_is_redacted_to_its_end_as_read(text: str, expected: str) -> None:
    assert sanitize.clean(text) == expected


# --- Tracebacks ---

SITE = "/home/deploy/.venv/lib/python3.11/site-packages"


@pytest.mark.parametrize(
    ("path", "short"),
    [
        (f"{SITE}/django/db/models/query.py", "django/db/models/query.py"),
        ("/usr/lib/python3/dist-packages/requests/api.py", "requests/api.py"),
        # The nearest (last) site-packages wins: a vendored tree inside a package.
        (f"{SITE}/pip/_vendor/site-packages/rich/console.py", "rich/console.py"),
        ("C:\\app\\venv\\Lib\\site-packages\\pkg\\mod.py", "pkg\\mod.py"),
        # Not absolute: nothing to hide.
        ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap>"),
        ("app/tasks.py", "app/tasks.py"),
    ],
)
def test_shorten_paths_cuts_site_packages_prefixes(path: str, short: str) -> None:
    text = f'Traceback (most recent call last):\n  File "{path}", line 3, in f\n    g()\nValueError: x'
    assert sanitize.shorten_paths(text) == text.replace(f'"{path}"', f'"{short}"')


def test_shorten_paths_makes_paths_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = f'  File "{tmp_path}/shop/tasks.py", line 12, in charge\n'
    assert sanitize.shorten_paths(text) == '  File "shop/tasks.py", line 12, in charge\n'


def test_shorten_paths_makes_paths_relative_to_sys_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", "/opt/company-x/venv")
    text = '  File "/opt/company-x/venv/lib/python3.11/json/decoder.py", line 337, in decode\n'
    assert sanitize.shorten_paths(text) == '  File "lib/python3.11/json/decoder.py", line 337, in decode\n'


def test_shorten_paths_keeps_only_the_file_name_outside_every_known_root() -> None:
    text = '  File "/srv/acme-prod-eu1/releases/42/shop/views.py", line 7, in index\n'
    assert sanitize.shorten_paths(text) == '  File "views.py", line 7, in index\n'


def test_shorten_paths_touches_only_traceback_file_lines() -> None:
    text = 'File "/etc/app.conf" is unreadable; see /var/log/app.log'
    assert sanitize.shorten_paths(text) == text


def _failing_task() -> None:
    raise ValueError("password=hunter2 rejected")


def test_clean_shortens_the_paths_of_a_real_traceback() -> None:
    try:
        _failing_task()
    except ValueError as exc:
        trace = "".join(traceback.format_exception(exc))
    assert 'File "/' in trace
    cleaned = sanitize.clean(f"TaskFailed: builtins.ValueError: boom\n{trace}")
    assert 'File "/' not in cleaned
    assert "test_sanitize.py" in cleaned
    assert "in _failing_task" in cleaned
    assert "hunter2" not in cleaned


def test_an_attempts_traceback_starts_at_the_handlers_frame_not_the_executors() -> None:
    # Issue 50: the logged and stored traceback began in reliableq/worker/executor.py.
    import uuid

    from reliableq.queue import ClaimedJob
    from reliableq.worker import executor

    job = ClaimedJob(id=uuid.uuid4(), kind="test.permanent", queue="default", priority=0, payload={}, attempt=1,
                     max_attempts=5, lease_token=uuid.uuid4(), worker_id="w")  # fmt: skip
    trace = executor.run_attempt(job).finish.traceback
    frames = [line for line in trace.splitlines() if line.startswith('  File "')]
    assert frames and frames[0].startswith('  File "testproject/jobs.py"'), trace
    assert "reliableq/" not in trace and "hunter2" not in trace


def test_without_traceback_keeps_only_the_text_before_the_traceback() -> None:
    try:
        try:
            _failing_task()
        except ValueError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as exc:
        trace = "".join(traceback.format_exception(exc))
    text = f"TaskFailed: builtins.RuntimeError: wrapped  \n{trace}"
    assert sanitize.without_traceback(text) == "TaskFailed: builtins.RuntimeError: wrapped"


def test_without_traceback_removes_an_exception_group_traceback() -> None:
    text = 'TaskFailed: x.Group: 2 errors\n  + Exception Group Traceback (most recent call last):\n  |   File "a.py"'
    assert sanitize.without_traceback(text) == "TaskFailed: x.Group: 2 errors"


@pytest.mark.parametrize("text", ["LeaseExpired: lease lost on worker w1", "", "Traceback"])
def test_without_traceback_leaves_text_without_a_traceback_alone(text: str) -> None:
    assert sanitize.without_traceback(text) == text


NEW_ADVERSARIAL = {
    "key-private-key": "private_key" * 18_200,
    "key-passphrase": "passphrase" * 20_000,
    "key-credentials": "credentials" * 18_200,
    "value-long-continuation": "password=a" + " 1" * 100_000,
    "value-prose-words": "password=a" + " b" * 100_000,
    "value-spaces": "password=a" + " " * 200_000,
    "value-pairs": "password=a" + " a=" * 66_000,
    "value-long-word": "password=a " + "x" * 200_000,
    "value-many-keys": "token=1 " * 25_000,
    "jwt-dashed-starts": "eyJ-" * 50_000,
    "jwt-one-dot": "eyJa." * 40_000,
    "jwt-two-segments": "eyJa.b " * 30_000,
    "jwt-long-run": "eyJ" + "a" * 200_000,
    "jwt-long-second": "eyJa." + "b" * 200_000,
    "basic-repeated": "basic " * 33_000,
    "basic-long-value": "Basic " + "A" * 200_000 + "===",
    "basic-spaces": "Basic " + " " * 200_000,
    "pem-begins": "-----BEGIN PRIVATE KEY-----" * 7_500,
    "pem-begin-prefixes": "-----BEGIN " * 18_000,
    "pem-ends": "-----BEGIN RSA PRIVATE KEY-----" + "-----END " * 22_000,
    "file-quotes": 'File "' * 33_000,
    "file-long-path": 'File "/' + "a/" * 100_000 + '", line 1',
    "file-many-lines": 'File "/x/site-packages/y.py", line 1\n' * 5_500,
    "file-many-markers": 'File "' + "/site-packages" * 14_000 + '", line 1',
    "traceback-prefixes": "Traceback (most recent call " * 7_000,
    "traceback-groups": "+ Exception Group " * 11_000,
    "traceback-spaces": " " * 200_000,
}


@pytest.mark.parametrize("text", list(NEW_ADVERSARIAL.values()), ids=list(NEW_ADVERSARIAL))
def test_new_patterns_stay_linear_on_long_adversarial_text(text: str) -> None:
    # 200 kB each; a pattern that backtracks or rescans per start position takes seconds to minutes here.
    assert len(text) >= 190_000
    # CPU time, not the clock's: CI runs this at the lowest priority beside other suites, where a
    # linear 0.1 s took 1.1 s of wall time; backtracking costs CPU time, seconds of it.
    for step in (sanitize.redact, sanitize.shorten_paths, sanitize.without_traceback):
        started = time.thread_time()
        step(text)
        assert time.thread_time() - started < 1.0, step.__name__
