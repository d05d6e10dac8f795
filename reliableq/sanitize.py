"""Turn an exception into an error text that is safe to store: bounded, no secrets."""

from __future__ import annotations

import re
import traceback

from .conf import reliableq_settings

REDACTED = "[redacted]"

# Each pattern keeps its first group (the label) and replaces what follows it.
_SECRETS = [
    # key=value and key: value pairs whose key names a secret, also at the end of a longer name
    # (DB_PASSWORD, access_token, SECRET_KEY), with either quote style (JSON, Python repr);
    # a quoted value is redacted whole, spaces included. No leading \b and no prefix pattern:
    # the match may start inside a name, which keeps the scan linear in the text's length.
    re.compile(
        r"(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|"
        r"client[_-]?secret|authorization|auth|cookie|session(?:id)?|card(?:[_-]?number)?|cvv|cvc)"
        r"(?:[_-]?(?:key|id|value|token))?[\"']?\s*[:=]\s*)"
        r"(?:\"[^\"]*\"|'[^']*'|[\"']?(?:(?:bearer|basic|token)\s+)?[^\s\"',;&}]+)"
    ),
    # credentials inside URLs: scheme://user:password@host (the user may be empty); the scheme's
    # length is bounded so that long runs of letters and dashes do not make the scan quadratic
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]*:)[^@\s/]+(?=@)"),
    # bearer tokens outside key=value form
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+"),
]
# Long card-like digit runs and provider-style keys (sk_live_..., ghp_..., AKIA...).
_BARE = [
    re.compile(r"\b(?:\d[ -]?){13,19}\b"),
    re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
]


def redact(text: str) -> str:
    for pattern in _SECRETS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    for pattern in _BARE:
        text = pattern.sub(REDACTED, text)
    return text


def bound(text: str, limit: int | None = None) -> str:
    limit = reliableq_settings.MAX_ERROR_CHARS if limit is None else limit
    if len(text) <= limit:
        return text
    # Size the marker for the largest count it can show, so that text + marker fits the limit.
    keep = limit - len(f" ... [{len(text)} characters cut]")
    if keep <= 0:
        return text[:limit]
    return text[:keep] + f" ... [{len(text) - keep} characters cut]"


def describe(exc: BaseException) -> str:
    """One bounded, redacted line: the exception type, its message and where it was raised."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if frames:
        last = frames[-1]
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    message = str(exc).strip()
    text = f"{type(exc).__name__}: {message}{where}" if message else f"{type(exc).__name__}{where}"
    return clean(text)


def clean(text: str) -> str:
    return bound(redact(text))
