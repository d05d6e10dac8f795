"""Request validation and response shapes for /v1/jobs."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from .. import registry
from ..models import Attempt, Job, JobStatus

QUEUE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
PRIORITY_RANGE = (-1000, 1000)
MAX_ATTEMPTS_RANGE = (1, 100)


class StrictIntegerField(serializers.IntegerField):
    """An integer, and only an integer: no "5", no 5.0, no true."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 timestamp with an explicit offset; a naive one is refused, not guessed."""

    def to_internal_value(self, value: Any) -> Any:
        if not isinstance(value, str):
            self.fail("invalid", format="ISO 8601 with a UTC offset, like 2030-01-01T12:00:00Z")
        parsed = super().to_internal_value(value)
        return parsed

    def enforce_timezone(self, value: Any) -> Any:
        if timezone.is_naive(value):
            raise serializers.ValidationError("run_at needs a UTC offset (like 2030-01-01T12:00:00Z); naive times are ambiguous.")
        return super().enforce_timezone(value)


class SubmitSerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=200)
    payload = serializers.JSONField()
    queue = serializers.RegexField(QUEUE, required=False, default="default",
                                   error_messages={"invalid": "Letters, digits and _.:- only, at most 100 characters."})
    priority = StrictIntegerField(required=False, default=0, min_value=PRIORITY_RANGE[0], max_value=PRIORITY_RANGE[1])
    run_at = AwareDateTimeField(required=False, allow_null=True, default=None)
    max_attempts = StrictIntegerField(required=False, allow_null=True, default=None,
                                      min_value=MAX_ATTEMPTS_RANGE[0], max_value=MAX_ATTEMPTS_RANGE[1])

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)

    def validate_kind(self, value: str) -> str:
        try:
            registry.get(value)
        except registry.UnknownKind:
            raise serializers.ValidationError(
                f"No handler is registered for kind {value!r}. Registered kinds: {', '.join(registry.kinds())}."
            ) from None
        return value

    def validate_payload(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("The payload must be a JSON object.")
        why = unstorable(value)
        if why:
            raise serializers.ValidationError(why)
        return value


def unstorable(value: Any) -> str | None:
    """Why PostgreSQL's jsonb would refuse this parsed JSON value, or None if it can store it.

    Valid JSON that jsonb refuses: the escape \\u0000, a lone surrogate (\\ud800), and numbers
    too large for a float (1e400 parses as infinity). Refused here, they are a 400; at the
    INSERT they would be a DataError, answered as a 503 "try again" that can never succeed.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "Strings in the payload cannot contain the NUL character (\\u0000)."
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "Strings in the payload cannot contain unpaired surrogates (like \\ud800)."
        elif isinstance(item, float) and not math.isfinite(item):
            return "Numbers in the payload must be finite (1e400 is not)."
    return None


def payload_size(payload: Any) -> int:
    return len(json.dumps(payload, separators=(",", ":")).encode())


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = ["number", "worker_id", "lease_token", "started_at", "finished_at", "outcome", "error"]


class JobSerializer(serializers.ModelSerializer):
    """A job with its attempt history: `attempts` is the list, `attempt_count` the number."""

    effect_key = serializers.CharField(read_only=True)
    attempt_count = serializers.IntegerField(source="attempts", read_only=True)
    attempts = AttemptSerializer(source="attempt_set", many=True, read_only=True)

    class Meta:
        model = Job
        fields = [
            "id", "kind", "queue", "priority", "payload", "status", "attempt_count", "max_attempts", "run_at",
            "lease_expires_at", "worker_id", "last_error", "dedupe_key", "effect_key", "created_at",
            "updated_at", "finished_at", "attempts",
        ]


class FilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=JobStatus.values, required=False)
    kind = serializers.CharField(max_length=200, required=False)
    queue = serializers.RegexField(QUEUE, required=False)
    cursor = serializers.CharField(required=False)
    page_size = serializers.IntegerField(required=False, min_value=1, max_value=500)
