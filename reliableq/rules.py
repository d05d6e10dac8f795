"""What a valid job is: one place for every rule, used by enqueue, the API, runworker and the schema.

Each check raises InvalidJob naming the part of the submission that is wrong. The API turns
that into a 400 (413 for an oversized payload); a Python caller gets it as a ValueError, never
as a database error at the INSERT.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .conf import reliableq_settings
from .errors import InvalidJob

# For the OpenAPI document (ECMA regex, where "$" ends the text). Python's "$" also matches before
# a final newline ("default\n"), so Python checks with \A...\Z and fullmatch.
QUEUE_PATTERN = r"^[A-Za-z0-9_.:-]{1,100}$"
QUEUE = re.compile(r"\A[A-Za-z0-9_.:-]{1,100}\Z")
QUEUE_HELP = "a non-empty name of at most 100 characters: letters, digits and _.:- only"
PRIORITY_RANGE = (-1000, 1000)  # lower runs first
MAX_ATTEMPTS_RANGE = (1, 100)
MAX_KEY_CHARS = 255  # dedupe_key and Idempotency-Key
# A workflow callback's dedupe key is `workflow:<workflow id>:<run>:<event>`, in the scope of the
# workflow's submitter (so that it counts toward their unfinished jobs): no other key may start so.
CALLBACK_KEY_PREFIX = "workflow:"
MAX_KIND_CHARS = 200
# Deeper documents are refused: Python's json and the admin's pretty-printer recurse once per
# level, and nothing a handler needs is nested this deep.
MAX_PAYLOAD_DEPTH = 64


class PayloadTooLarge(InvalidJob):
    """The payload is over MAX_PAYLOAD_BYTES (the API answers 413)."""


def queue_name(value: Any, *, field: str = "queue") -> str:
    if not isinstance(value, str) or not QUEUE.fullmatch(value):
        raise InvalidJob(f"{field} must be {QUEUE_HELP} (got {value!r}).", field=field)
    return value


def http_queue(value: Any) -> str:
    """A queue an HTTP submitter may use: well-formed, and one of RELIABLEQ["HTTP_QUEUES"] (or any, with "*")."""
    if not isinstance(value, str) or not QUEUE.fullmatch(value):
        raise InvalidJob(f"The queue must be {QUEUE_HELP}.", field="queue")
    allowed = list(reliableq_settings.HTTP_QUEUES)
    if "*" not in allowed and value not in allowed:
        shown = ", ".join(repr(q) for q in allowed[:10]) + (", ..." if len(allowed) > 10 else "")
        raise InvalidJob(
            f"Queue {value!r} is not open to HTTP submissions; the site allows {shown or 'none'} (HTTP_QUEUES).",
            field="queue",
        )
    return value


# Over HTTP a job may not be more urgent than the default: a client-chosen priority below 0 would
# run one user's backlog ahead of every other user's work. Code (enqueue) keeps the whole range.
HTTP_PRIORITY_RANGE = (0, PRIORITY_RANGE[1])


def http_priority(value: Any) -> int:
    low, high = HTTP_PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJob(
            f"priority over HTTP must be an integer from {low} to {high}: lower runs first, and nothing "
            "submitted over HTTP runs ahead of the default (0).",
            field="priority",
        )
    return value


def priority(value: Any) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJob(f"priority must be an integer from {low} to {high}; lower runs first.", field="priority")
    return value


def max_attempts(value: Any) -> int:
    low, high = MAX_ATTEMPTS_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJob(f"max_attempts must be at least {low} and at most {high}.", field="max_attempts")
    return value


def key(value: Any, *, field: str = "dedupe_key") -> str:
    """A dedupe key: a non-empty string of at most 255 characters that a text column can store."""
    if not isinstance(value, str) or not value or len(value) > MAX_KEY_CHARS:
        raise InvalidJob(f"{field} must be a non-empty string of at most {MAX_KEY_CHARS} characters.", field=field)
    why = _unstorable_text(value)
    if why:
        raise InvalidJob(f"{field}: {why}", field=field)
    if field in ("dedupe_key", "Idempotency-Key") and value.startswith(CALLBACK_KEY_PREFIX):
        raise InvalidJob(
            f"{field} may not start with {CALLBACK_KEY_PREFIX!r}: such keys name workflow callbacks.", field=field
        )
    return value


def run_at(value: Any, *, field: str = "run_at") -> dt.datetime | None:
    """An aware time no further ahead than MAX_SCHEDULE_SECONDS; a past time means now (the INSERT clamps it)."""
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        raise InvalidJob(f"{field} must be a datetime.", field=field)
    if timezone.is_naive(value):
        raise InvalidJob(f"{field} must be timezone-aware.", field=field)
    ahead = float(reliableq_settings.MAX_SCHEDULE_SECONDS)
    # The caller's clock decides only this coarse bound; the stored time itself is compared
    # with the database's now() at the INSERT.
    if value > timezone.now() + dt.timedelta(seconds=ahead):
        raise InvalidJob(
            f"{field} is more than {ahead:.0f} seconds ({ahead / 86400:.4g} days) ahead, the limit set by "
            "MAX_SCHEDULE_SECONDS; schedule it closer.",
            field=field,
        )
    return value


def debounce(seconds: Any, max_seconds: Any, *, unique_key: str | None, dedupe_key: str | None, run_at: Any) -> None:
    """debounce and debounce_max: seconds (more than 0, at most MAX_SCHEDULE_SECONDS), on a job with a
    unique_key whose start they decide (so no run_at) and whose payload they replace (so no dedupe_key)."""
    if seconds is None:
        if max_seconds is not None:
            raise InvalidJob("debounce_max caps a debounce: give debounce too.", field="debounce_max")
        return
    _seconds(seconds, field="debounce")
    if max_seconds is not None and _seconds(max_seconds, field="debounce_max") < seconds:
        raise InvalidJob(
            f"debounce_max ({max_seconds}) must be at least debounce ({seconds}): it caps the delay.",
            field="debounce_max",
        )
    if unique_key is None:
        raise InvalidJob(
            "debounce needs a unique_key: it replaces the payload of that key's PENDING job.", field="debounce"
        )
    if dedupe_key is not None:
        raise InvalidJob(
            "A dedupe_key cannot be combined with debounce: the job's payload changes, a dedupe key's never does.",
            field="dedupe_key",
        )
    if run_at is not None:
        raise InvalidJob("run_at cannot be combined with debounce: debounce decides when the job runs.", field="run_at")


def _seconds(value: Any, *, field: str) -> float:
    ahead = float(reliableq_settings.MAX_SCHEDULE_SECONDS)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= ahead
    ):
        raise InvalidJob(
            f"{field} must be a number of seconds above 0 and at most {ahead:.0f} (MAX_SCHEDULE_SECONDS); "
            f"got {value!r}.",
            field=field,
        )
    return float(value)


def aware_time(value: Any, *, field: str) -> dt.datetime:
    """Read text as an ISO 8601 time with an explicit offset, in UTC; a naive one is refused, not guessed."""
    example = "like 2030-01-01T12:00:00Z"
    if not isinstance(value, str):
        raise InvalidJob(f"{field} must be an ISO 8601 time with a UTC offset, {example}.", field=field)
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidJob(f"{field} must be an ISO 8601 time with a UTC offset, {example}.", field=field)
    if parsed.tzinfo is None:
        raise InvalidJob(f"{field} needs a UTC offset ({example}); naive times are ambiguous.", field=field)
    try:
        return parsed.astimezone(dt.timezone.utc)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before the first representable UTC time
        raise InvalidJob(f"{field} is out of range.", field=field) from None


def payload(value: Any) -> str:
    """Check a payload and return it encoded as the JSON that will be stored."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InvalidJob("A job's payload must be a JSON object (a dict).", field="payload")
    try:
        # Compact and ASCII-only, as jsonb stores it anyway: its length is the payload's size.
        encoded = json.dumps(value, separators=(",", ":"), allow_nan=False)  # NaN and Infinity are not JSON
    except (TypeError, ValueError) as exc:
        where = unserializable_path(value)
        at = f" at {where}" if where else ""
        raise InvalidJob(
            f"The payload is not JSON-serializable{at}: {exc}. Send JSON values (dicts with string keys, lists, "
            "strings, numbers, booleans, None): a datetime as its isoformat(), a Decimal as a string.",
            field="payload",
        ) from None
    except RecursionError:
        raise InvalidJob(f"The payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep.", field="payload") from None
    why = unstorable(value)
    if why:
        raise InvalidJob(why, field="payload")
    limit = int(reliableq_settings.MAX_PAYLOAD_BYTES)
    if len(encoded) > limit:
        raise PayloadTooLarge(
            f"The payload is {len(encoded)} bytes; the limit is {limit} (MAX_PAYLOAD_BYTES).", field="payload"
        )
    return encoded


def unserializable_path(value: Any, root: str = "payload") -> str | None:
    """Where in `value` json.dumps would stop: `payload["when"]`, `payload["items"][2]` (None if nowhere)."""
    stack: list[tuple[Any, str]] = [(value, root)]  # depth first, in json.dumps's own order
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            children = []
            for k, v in item.items():
                if not isinstance(k, str | int | float | bool) and k is not None:
                    return f"{path} (the key {k!r})"
                children.append((v, f"{path}[{json.dumps(k) if isinstance(k, str) else k}]"))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(v, f"{path}[{i}]") for i, v in enumerate(item)]))
        elif (isinstance(item, float) and not math.isfinite(item)) or not (
            item is None or isinstance(item, str | int | float | bool)
        ):
            return path
    return None


def unstorable(value: Any) -> str | None:
    """Why PostgreSQL's jsonb would refuse this value (or it nests too deep), or None if it can store it.

    Valid JSON that jsonb refuses: the escape \\u0000, a lone surrogate (\\ud800), and numbers
    too large for a float (1e400 parses as infinity). Iterative, so a deep document cannot
    exhaust the stack while being checked.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_PAYLOAD_DEPTH:
                return f"The payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep."
            if isinstance(item, dict):
                for k, v in item.items():
                    if not isinstance(k, str):
                        continue  # json.dumps decides about non-string keys
                    why = _unstorable_text(k)
                    if why:
                        return why
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            why = _unstorable_text(item)
            if why:
                return why
        elif isinstance(item, float) and not math.isfinite(item):
            return "Numbers in the payload must be finite (NaN, Infinity and 1e400 are not)."
    return None


def label(value: Any, *, field: str, what: str, required: bool = True) -> str:
    """A name (a workflow's, a member's): text of at most 200 characters that PostgreSQL can store."""
    if not isinstance(value, str) or len(value) > 200 or (required and not value):
        raise InvalidJob(f"{what} is text of {'1' if required else '0'} to 200 characters.", field=field)
    why = _unstorable_text(value)
    if why:
        raise InvalidJob(f"{what}: {why}", field=field)
    return value


def _unstorable_text(text: str) -> str | None:
    if "\x00" in text:
        return "Strings cannot contain the NUL character (\\u0000)."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Strings cannot contain unpaired surrogates (like \\ud800)."
    return None
