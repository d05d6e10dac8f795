"""Events: reliableq.emit(name, payload) wakes the jobs that wait for `name` (job.wait_for), once.

An event is recorded once per name, in the caller's transaction: a second emit of the name changes
nothing and returns the first record, so a retried webhook wakes nothing twice; an emit that rolls
back wakes nothing. A job that waits for an event emitted already gets its payload at once.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from . import audit, rules
from .conf import reliableq_settings
from .errors import InvalidJob
from .models import Event
from .queue import db
from .queue import events as statements

MAX_NAME_CHARS = 255
EMITTED = "Emitted the event"


def check_name(name: Any) -> str:
    """An event's name: a string of 1 to 255 characters that a text column can store."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        what = f"An event's name is a string of 1 to {MAX_NAME_CHARS} characters, not {name!r}."
        raise InvalidJob(what, field="name")
    return rules.key(name, field="name")


def encoded_payload(payload: Any) -> str:
    """The payload as the JSON to store: None, or a JSON object within MAX_PAYLOAD_BYTES."""
    return "null" if payload is None else rules.payload(payload)


def emit(name: str, payload: dict[str, Any] | None = None, *, by: Any = None) -> Event:
    """Record the event `name` and make every job waiting for it PENDING, in the caller's transaction (on
    the queue's database); return the event: this one, or the first of the name (then nothing is woken).
    Its `woken` attribute says how many jobs this emit woke. With `by` (a user), the emit is audited."""
    name = check_name(name)
    encoded = encoded_payload(payload)
    emitted_by = "" if by is None else str(by.get_username())
    with db.atomic():
        woken, made = statements.emit(name, encoded, emitted_by=emitted_by)
        event: Event = Event.objects.get(name=name)
        if by is not None and made:
            audit.record(by, event, f"{EMITTED}: {woken} job(s) woken.")
    event.woken = woken  # type: ignore[attr-defined]
    event.made = made  # type: ignore[attr-defined]
    return event


def open_to_http(name: str) -> bool:
    """Whether a pattern of RELIABLEQ["HTTP_EVENTS"] (shell-style, case-sensitive) matches `name`."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in reliableq_settings.HTTP_EVENTS)


def emit_over_http(name: Any, payload: Any, *, by: Any) -> Event:
    """emit() for POST /v1/events/<name>: a well-formed name the site opens to HTTP (HTTP_EVENTS), audited.

    An emit wakes whatever waits for its name, so a name is closed unless the site opened it: a user
    allowed to emit `order-42-paid` could otherwise release an unpaid order's job."""
    name = check_name(name)
    if not open_to_http(name):
        raise InvalidJob(
            f"The event {name!r} is not open to HTTP: no pattern of RELIABLEQ['HTTP_EVENTS'] matches it.",
            field="name",
        )
    return emit(name, payload, by=by)


def payload_of(event: Event) -> Any:
    return json.loads(event.payload) if isinstance(event.payload, str) else event.payload
