"""What a client may submit to POST /v1/workflows: members and callbacks, each read as one job of
POST /v1/jobs is (reliableq.api.submission), plus a member's name, `after` and on_upstream_failure.

Every member is read and every problem reported, keyed by index (`members[3].after`); a kind not
open to HTTP is set apart, since the view answers it with a 403 rather than a 400.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .. import rules
from ..models import OnUpstreamFailure
from ..workflows import EVENTS, MAX_AFTER, MAX_MEMBERS, WorkflowBuilder
from .submission import Invalid, Submission, parse

WORKFLOW_FIELDS = ("name", "members", "callbacks")
MEMBER_FIELDS = ("name", "after", "on_upstream_failure")
CALLBACK_FIELDS = ("kind", "payload", "queue", "priority", "max_attempts")
NOT_OPEN = "cannot be submitted over HTTP"  # reliableq.registry.for_http's refusal, to sort it out


class TooLarge(Exception):
    """Over MAX_MEMBERS members or MAX_AFTER `after` entries: the view answers 413."""


def cost(data: Any) -> int:
    """What the body costs against the submit rate, counted before anything in it is checked: its
    members, plus its `after` entries beyond one per member (a chain or a fan-in costs its members,
    a dense graph its entries). TooLarge past either bound, at the price of one pass over the list."""
    members = data.get("members") if isinstance(data, dict) else None
    if not isinstance(members, list):
        return 1
    if len(members) > MAX_MEMBERS:
        raise TooLarge(f"At most {MAX_MEMBERS:,} members per workflow; this one has {len(members):,}.")
    entries = sum(len(m["after"]) for m in members if isinstance(m, dict) and isinstance(m.get("after"), list))
    if entries > MAX_AFTER:
        raise TooLarge(f"At most {MAX_AFTER:,} `after` entries per workflow in all; this one has {entries:,}.")
    return max(1, len(members), entries)


@dataclass(slots=True)
class Closed(Exception):
    """Members or callbacks whose kind HTTP may not submit: the view answers 403 naming them."""

    errors: dict[str, list[str]] = field(default_factory=dict)


def _is_closed(messages: list[str]) -> bool:
    return any(NOT_OPEN in m for m in messages)


def parse_workflow(data: Any) -> WorkflowBuilder:
    """The body as a builder (nothing stored); Invalid, Closed, TooLarge or rules.PayloadTooLarge."""
    if not isinstance(data, dict):
        raise Invalid({"non_field_errors": ["The body must be a JSON object."]})
    unknown = sorted(set(data) - set(WORKFLOW_FIELDS))
    if unknown:
        raise Invalid({name: ["Unknown field."] for name in unknown})
    name = data.get("name", "")
    if not isinstance(name, str) or len(name) > 200:
        raise Invalid({"name": ["A workflow's name is text of at most 200 characters."]})
    members = data.get("members")
    if not isinstance(members, list) or not members:
        raise Invalid({"members": ["A non-empty list of members is required."]})
    if len(members) > MAX_MEMBERS:
        raise TooLarge(f"At most {MAX_MEMBERS:,} members per workflow; this one has {len(members):,}.")
    builder = WorkflowBuilder(name=name)
    errors: dict[str, list[str]] = {}
    closed: dict[str, list[str]] = {}
    for index, item in enumerate(members):
        where = f"members[{index}]"
        try:
            sub, extra = _member(item, where)
        except Invalid as exc:
            for key, messages in exc.errors.items():
                (closed if key.endswith(".kind") and _is_closed(messages) else errors)[key] = messages
            continue
        builder.add(
            sub.kind,
            sub.payload,
            name=extra["name"],
            after=extra["after"],
            on_upstream_failure=extra["on_upstream_failure"],
            **_options(sub),
        )
    callbacks = data.get("callbacks", {})
    if not isinstance(callbacks, dict) or set(callbacks) - set(EVENTS):
        errors["callbacks"] = [f"An object whose keys are among {', '.join(EVENTS)}."]
    else:
        for event, item in callbacks.items():
            where = f"callbacks.{event}"
            if not isinstance(item, dict) or set(item) - set(CALLBACK_FIELDS):
                errors[where] = [f"A callback is an object of {', '.join(CALLBACK_FIELDS)}."]
                continue
            try:
                sub = parse(item)
            except Invalid as exc:
                for key, messages in exc.errors.items():
                    (closed if key == "kind" and _is_closed(messages) else errors)[f"{where}.{key}"] = messages
                continue
            o = sub.options
            builder.on(event, sub.kind, sub.payload, queue=o.queue, priority=o.priority, max_attempts=o.max_attempts)
    if errors:
        raise Invalid(errors)
    if closed:
        raise Closed(closed)
    return builder


def _member(item: Any, where: str) -> tuple[Submission, dict[str, Any]]:
    if not isinstance(item, dict):
        raise Invalid({where: ["A member is a JSON object."]})
    extra = {k: item[k] for k in MEMBER_FIELDS if k in item}
    problems: dict[str, list[str]] = {}
    name = extra.get("name")
    if not isinstance(name, str) or not name or len(name) > 200:
        problems[f"{where}.name"] = ["A member's name is required: 1 to 200 characters."]
    after = extra.get("after", [])
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        problems[f"{where}.after"] = ["A list of the names of members of this workflow."]
    failure = extra.get("on_upstream_failure", OnUpstreamFailure.CANCEL)
    if failure not in OnUpstreamFailure.values:
        problems[f"{where}.on_upstream_failure"] = ["Either 'cancel' or 'run'."]
    try:
        sub = parse({k: v for k, v in item.items() if k not in MEMBER_FIELDS})
    except Invalid as exc:
        problems.update({f"{where}.{k}": v for k, v in exc.errors.items()})
    except rules.PayloadTooLarge as exc:
        raise type(exc)(f"member {where}: {exc}", field=f"{where}.payload") from None
    if problems:
        raise Invalid(problems)
    if sub.options.unique_key is not None:
        raise Invalid({f"{where}.unique_key": ["A workflow's member takes no unique_key."]})
    return sub, {"name": name, "after": after, "on_upstream_failure": failure}


def _options(sub: Submission) -> dict[str, Any]:
    o = sub.options
    return {"queue": o.queue, "priority": o.priority, "run_at": o.run_at, "max_attempts": o.max_attempts}


def body_fingerprint(data: Any) -> str:
    """The body as canonical JSON, hashed: what an Idempotency-Key of POST /v1/workflows is bound to."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
