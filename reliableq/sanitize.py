"""Turn an exception into an error text that is safe to store: bounded, no secrets."""

from __future__ import annotations

import base64
import binascii
import os
import re
import sys
import traceback
from types import TracebackType

from .conf import reliableq_settings

REDACTED = "[redacted]"

# Every pattern here runs on error texts an attacker may shape (an upstream's answer, a payload echoed
# in a message), so each must stay linear in the text's length: no nested or overlapping quantifiers,
# and no unbounded run that a pattern could start scanning again from each position inside it.

# PEM private key blocks, redacted before the key=value rules: these would stop at the first line
# break and keep the key's body. A block without its END line (cut by bound() or by the sender) is
# redacted to the end of the text. The lazy scan stops at the first END line, and the matches do not
# overlap, so each character is looked at a bounded number of times.
_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,10}-----"
    r"[\s\S]*?(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,10}-----|\Z)"
)

# An unquoted value after a secret-named key runs to the first whitespace, quote, `,` `;` `&` or `}`
# (as a URL query or a Cookie header ends it), and then goes on over the next space-separated words
# on the same line for as long as each reads as part of the secret rather than as the message around
# it: the word holds a digit or one of @#$%^*+=~|/\<>[]{ , does not start with `(`, and is not itself
# a `name=` / `name:` pair. So `password=p@ss w0rd` is redacted whole, `password=x user=bob` keeps
# `user=bob`, `PASSWORD = hunter2 for user bob` keeps `for user bob` (plain words read as prose), and
# describe()'s ` (at file.py:3 in f)` survives. Running to the end of the line instead would redact
# the prose that follows a value too ("hunter2 expired"), which the operator needs to read. Known
# limit: a plain word after the value (`password=p@ss word`) is kept; a quoted value is redacted whole.
# Linear: each continuation word is scanned by the two lookaheads and then consumed, or ends the match.
_VALUE_CHAR = r"[^\s\"',;&}]"
_CONTINUATION = (
    r"(?:[ \t]+"
    r"(?!\(|[A-Za-z_][\w.-]*[\"']?[:=])"
    r"(?=[^\s\"',;&}0-9@#$%^*+=~|/\\<>\[\]{]*[0-9@#$%^*+=~|/\\<>\[\]{])"
    rf"{_VALUE_CHAR}+)*"
)

# Each pattern keeps its first group (the label) and replaces what follows it.
_SECRETS = [
    # key=value and key: value pairs whose key names a secret, also at the end of a longer name
    # (DB_PASSWORD, access_token, SECRET_KEY, SSH_PRIVATE_KEY, db_credentials), with either quote style
    # (JSON, Python repr); a quoted value is redacted whole, spaces included. No leading \b and no
    # prefix pattern: the match may start inside a name, which keeps the scan linear in the text's length.
    re.compile(
        r"(?i)((?:password|passwd|pwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
        r"client[_-]?secret|credentials?|authorization|auth|cookie|session(?:id)?|card(?:[_-]?number)?|"
        r"cvv|cvc)"
        r"(?:[_-]?(?:key|id|value|token))?[\"']?\s*[:=]\s*)"
        rf"(?:\"[^\"]*\"|'[^']*'|[\"']?(?:(?:bearer|basic|token)\s+)?{_VALUE_CHAR}+{_CONTINUATION})"
    ),
    # credentials inside URLs: scheme://user:password@host (the user may be empty); the scheme's
    # length is bounded so that long runs of letters and dashes do not make the scan quadratic
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]*:)[^@\s/]+(?=@)"),
    # bearer tokens outside key=value form
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+"),
]

# Basic credentials outside key=value form. Unlike "bearer", "basic" is an everyday word ("basic auth
# is off"), so the word after it is redacted only when it reads as base64 (see _basic).
# The value must end the base64 run, padding included: "Basic realm=api" is a challenge, not a credential.
_BASIC = re.compile(r"(?i)(\bbasic\s+)([A-Za-z0-9+/]+={0,2})(?![A-Za-z0-9+/=])")
_WORD = re.compile(r"[A-Za-z][a-z]*")

# Long card-like digit runs, provider-style keys (sk_live_..., ghp_..., AKIA...) and JWTs.
_BARE = [
    re.compile(r"\b(?:\d[ -]?){13,19}\b"),
    re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    # JWTs (JWS: header.payload.signature, the signature empty with alg "none"; JWE: five segments,
    # the second empty with direct encryption). The header is base64url JSON, so it starts "eyJ".
    # The lookbehind lets a match start only where a run of base64url characters starts: a plain \b
    # would also start one after each "-" inside a run ("eyJ-eyJ-..."), and each start would scan the
    # rest of the run again. Segments cannot hold ".", so a text splits into them one way only. The
    # optional fourth and fifth segments must not be empty, so a full stop after a token stays.
    re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+){0,2}"),
]


def _basic(match: re.Match[str]) -> str:
    value = match.group(2)
    if _WORD.fullmatch(value) and b":" not in _b64decode(value):
        # A plain word ("auth", "realm", "Authentication"): base64 of "user:password" is almost never
        # letters only with at most the first one upper-case, and when it is, it still decodes to a ":".
        return match.group(0)
    return match.group(1) + REDACTED


def _b64decode(value: str) -> bytes:
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        return b""


def redact(text: str) -> str:
    text = _PEM.sub(REDACTED, text)
    for pattern in _SECRETS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BASIC.sub(_basic, text)
    for pattern in _BARE:
        text = pattern.sub(REDACTED, text)
    return text


# The path in a traceback's `  File "/abs/path/mod.py", line 3, in f` lines. Only lines of that shape:
# a message naming a file ('File "/etc/app.conf" is unreadable') is the error itself, not layout.
_FILE_LINE = re.compile(r"(\bFile \")([^\"\n]+)(?=\", line \d)")
_PACKAGES_DIR = re.compile(r"[\\/](?:site|dist)-packages[\\/]")
_WINDOWS_ABSOLUTE = re.compile(r"[A-Za-z]:[\\/]|\\\\")


def shorten_paths(text: str) -> str:
    """Make the file paths of traceback lines relative, so the stored text does not disclose the server's layout.

    A path is cut after its nearest (last) site-packages or dist-packages directory, else made relative to
    the longest of the working directory, sys.prefix, sys.base_prefix and the absolute sys.path entries
    that holds it, which leaves the module's path readable (django/db/models/query.py, shop/tasks.py).
    A path under none of them keeps only its file name. Relative paths and "<frozen ...>" stay as they are.
    """
    roots: list[str] | None = None

    def short(match: re.Match[str]) -> str:
        nonlocal roots
        path = match.group(2)
        if not (path.startswith("/") or _WINDOWS_ABSOLUTE.match(path)):
            return match.group(0)
        last: re.Match[str] | None = None
        for found in _PACKAGES_DIR.finditer(path):
            last = found  # the nearest packages directory is the last one in the path
        if last is not None and last.end() < len(path):
            return match.group(1) + path[last.end() :]
        if roots is None:
            roots = _roots()
        for root in roots:
            if path.startswith(root) and len(path) > len(root):
                return match.group(1) + path[len(root) :]
        return match.group(1) + re.split(r"[\\/]", path)[-1]

    return _FILE_LINE.sub(short, text)


def _roots() -> list[str]:
    """The directories a path is made relative to, each ending in a separator, longest (nearest) first."""
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    candidates += [entry for entry in sys.path if entry]
    try:
        candidates.append(os.getcwd())
    except OSError:  # the working directory was removed
        pass
    roots: set[str] = set()
    for candidate in candidates:
        root = candidate.rstrip("/\\")
        # The filesystem's root (or a bare drive) would leave the whole layout in the path.
        if os.path.isabs(candidate) and root and not root.endswith(":"):
            roots.add(root + os.sep)
    return sorted(roots, key=len, reverse=True)


# The first line of a traceback, also of an exception group's (`  + Exception Group Traceback ...`).
# The group prefix is a literal, not a run of spaces and "+": that would be rescanned from each space.
_TRACEBACK = re.compile(r"(?:\+ Exception Group )?Traceback \(most recent call last\):")


def without_traceback(text: str) -> str:
    """The text before its first traceback, trailing whitespace stripped; a text without one is kept as it is.

    Tracebacks show code and paths, so the API shows them only to operators allowed to see them.
    """
    match = _TRACEBACK.search(text)
    if match is None:
        return text
    return text[: match.start()].rstrip()


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
    # Paths are shortened first so that the cut keeps more of the message, and redaction runs before
    # the cut so that no secret survives half-cut at the edge.
    return storable(bound(redact(shorten_paths(text))))


def storable(text: str) -> str:
    """Text a PostgreSQL text column (and jsonb) can hold: a NUL written as `\\x00`, a lone surrogate
    as `?`. A handler's exception may carry either; its failure must still be recorded."""
    if text.isascii() and "\x00" not in text:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "replace").decode("utf-8")


MAX_TRACEBACK_CHARS = 16_000


# The queue's own package (and a Tasks framework's, see calls_handlers): their frames above a
# handler's are how the handler was called, not where it failed.
_CALLERS: tuple[str, ...] = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def calls_handlers(module_file: str) -> None:
    """Count the frames of the package holding `module_file` as the caller's, like the queue's own."""
    global _CALLERS
    prefix = os.path.dirname(os.path.abspath(module_file)) + os.sep
    if prefix not in _CALLERS:
        _CALLERS = (*_CALLERS, prefix)


def _from_the_callers_code(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from its first frame outside those packages on (the handler's, the task's); all
    of it when every frame is theirs (the queue itself failed: its frames are the story)."""
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename.startswith(_CALLERS):
        first = first.tb_next
    return first if first is not None else tb


def traceback_of(exc: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """The exception's traceback as traceback.format_exception writes it, from the handler's frames on
    (not the worker's that called it), with its file paths made relative and its secrets redacted, cut
    in the middle past `limit` (the last lines name the error)."""
    lines = traceback.format_exception(type(exc), exc, _from_the_callers_code(exc.__traceback__))
    text = storable(redact(shorten_paths("".join(lines))))
    if len(text) <= limit:
        return text
    keep = (limit - 60) // 2
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n... [{cut} characters cut] ...\n{text[-keep:]}"
