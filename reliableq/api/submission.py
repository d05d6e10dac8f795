"""What a client may submit: one job's body, read and checked by the rules of reliableq.rules.

Written out rather than a DRF serializer: POST /v1/jobs and each of up to 1,000 items of
POST /v1/jobs/batch go through it, and per item it costs a few dictionary lookups where a
serializer built a dozen field objects. Every field is checked and every problem reported.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from .. import registry, rules
from ..errors import InvalidJob, NotSubmittable
from ..models import Job
from ..options import JobOptions
from ..services import BATCH_UNIQUE_KEY, NewJob

FIELDS = ("kind", "payload", "queue", "priority", "run_at", "max_attempts", "unique_key")
# Fields of enqueue() that HTTP clients may not set, and why (a clearer 400 than "Unknown field").
NOT_OVER_HTTP = {
    "concurrency_key": "concurrency_key cannot be set over HTTP: its limit is shared by every submitter, so one "
    "user could hold back another's jobs. Set it in code (reliableq.enqueue).",
    "dedupe_key": "Send the dedupe key as the Idempotency-Key header.",
    "debounce": "debounce cannot be set over HTTP: it replaces a pending job's payload. Use "
    "reliableq.enqueue(..., unique_key=..., debounce=...) in code.",
    "debounce_max": "debounce_max cannot be set over HTTP: it caps a debounce, which HTTP does not accept.",
    "fair_key": "fair_key cannot be set over HTTP: a fair kind's jobs submitted over HTTP are shared by "
    "submitter, each user's jobs as one key.",
}
REQUIRED = "This field is required."


Submission = NewJob  # what services.submit_many takes; POST /v1/jobs passes its fields to services.submit
MAX_BATCH = 1000


class Invalid(Exception):
    """The body breaks rules; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__(errors)


def parse(data: Any) -> Submission:
    """Read one submission; Invalid with every field's problems, or rules.PayloadTooLarge (a 413)."""
    if not isinstance(data, dict):
        raise Invalid({"non_field_errors": ["The body must be a JSON object."]})
    errors: dict[str, list[str]] = {
        name: [NOT_OVER_HTTP.get(name, "Unknown field.")] for name in sorted(set(data) - set(FIELDS))
    }
    if errors:
        raise Invalid(errors)
    values: dict[str, Any] = {}
    for name, read in _READERS.items():
        try:
            values[name] = read(data)
        except InvalidJob as exc:
            if isinstance(exc, rules.PayloadTooLarge):
                raise
            errors[name] = [str(exc)]
    if errors:
        raise Invalid(errors)
    payload, encoded = values.pop("payload")
    kind = values.pop("kind")
    return Submission(kind=kind, payload=payload, options=JobOptions(**values), encoded=encoded)


def batch_items(data: Any) -> list[Any]:
    """The items of `{"jobs": [...]}`, unread: the view charges the throttle for them before checking each."""
    if not isinstance(data, dict) or set(data) != {"jobs"}:
        raise Invalid({"non_field_errors": ['The body must be a JSON object with one field, "jobs".']})
    items = data["jobs"]
    if not isinstance(items, list) or not items:
        raise Invalid({"jobs": ["A non-empty list of jobs is required."]})
    if len(items) > MAX_BATCH:
        raise Invalid({"jobs": [f"At most {MAX_BATCH} jobs per batch; this one has {len(items)}."]})
    return items


def parse_batch(data: Any) -> list[Submission]:
    """Read `{"jobs": [...]}`: every item checked; Invalid names each failing item by its index."""
    return parse_items(batch_items(data))


def parse_items(items: list[Any]) -> list[Submission]:
    """Every item of a batch checked; Invalid names each failing item by its index.

    An item with a unique_key is refused (services.submit_many cannot answer "that job already
    holds the key" per row of its one INSERT).
    """
    parsed: list[Submission] = []
    errors: dict[str, list[str]] = {}
    for index, item in enumerate(items):
        try:
            sub = parse(item)
            if sub.options.unique_key is not None:
                raise Invalid({"unique_key": [BATCH_UNIQUE_KEY]})
            parsed.append(sub)
        except Invalid as exc:
            errors.update({f"jobs[{index}].{field}": messages for field, messages in exc.errors.items()})
        except rules.PayloadTooLarge as exc:
            raise type(exc)(f"job {index}: {exc}", field=f"jobs[{index}].payload") from None
    if errors:
        raise Invalid(errors)
    return parsed


def fingerprint(items: list[Any]) -> str:
    """The batch's body as canonical JSON (keys sorted), hashed: what an Idempotency-Key is bound to."""
    text = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def same(job: Job, sub: Submission) -> bool:
    """Whether a repeated Idempotency-Key came with the body that made `job`.

    kind, payload, queue, priority and unique_key never change. run_at and max_attempts do (a retry
    moves run_at, a replay raises max_attempts), so they are compared only while the job
    has never been claimed; after that a resent body is taken as the same submission.
    """
    o = sub.options
    if (job.kind, job.payload, job.queue, job.priority, job.unique_key) != (
        sub.kind,
        sub.payload,
        o.queue,
        o.priority,
        o.unique_key,
    ):
        return False
    if job.attempts:
        return True
    if o.max_attempts is not None and o.max_attempts != job.max_attempts:
        return False
    # A run_at in the past was stored as the INSERT's now(), the job's created_at.
    return o.run_at is None or max(o.run_at, job.created_at) == job.run_at


def _kind(data: dict[str, Any]) -> str:
    if "kind" not in data:
        raise InvalidJob(REQUIRED)
    kind = data["kind"]
    if not isinstance(kind, str) or not kind.strip():
        raise InvalidJob("A kind is a non-empty string.")
    if len(kind) > rules.MAX_KIND_CHARS:
        raise InvalidJob(f"Ensure this field has no more than {rules.MAX_KIND_CHARS} characters.")
    try:
        registry.for_http(kind)
    except NotSubmittable as exc:
        raise InvalidJob(str(exc)) from None
    return kind


def _payload(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    if "payload" not in data:
        raise InvalidJob(REQUIRED)
    payload = data["payload"]
    if not isinstance(payload, dict):  # (enqueue takes None for {}; a client sends an object)
        raise InvalidJob("The payload must be a JSON object.")
    return payload, rules.payload(payload)  # InvalidJob, or PayloadTooLarge


def _queue(data: dict[str, Any]) -> str:
    return rules.http_queue(data.get("queue", "default"))


def _strict_int(value: Any) -> int:
    """An integer, and only an integer: no "5", no 5.0, no true."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob("A valid integer is required.")
    return value


def _priority(data: dict[str, Any]) -> int:
    return rules.http_priority(_strict_int(data.get("priority", 0)))


def _max_attempts(data: dict[str, Any]) -> int | None:
    value = data.get("max_attempts")
    return None if value is None else rules.max_attempts(_strict_int(value))


def _run_at(data: dict[str, Any]) -> dt.datetime | None:
    value = data.get("run_at")
    return None if value is None else rules.run_at(rules.aware_time(value, field="run_at"))


def _unique_key(data: dict[str, Any]) -> str | None:
    """At most one PENDING or RUNNING job of the kind per key, among this submitter's jobs."""
    value = data.get("unique_key")
    return None if value is None else rules.key(value, field="unique_key")


_READERS = {
    "kind": _kind,
    "payload": _payload,
    "queue": _queue,
    "priority": _priority,
    "run_at": _run_at,
    "max_attempts": _max_attempts,
    "unique_key": _unique_key,
}
