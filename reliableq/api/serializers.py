"""Request validation and response shapes for /v1/jobs."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from .. import registry, rules
from ..errors import InvalidJob, NotSubmittable
from ..models import JobStatus
from . import problems

QUEUE = rules.QUEUE
PRIORITY_RANGE = rules.PRIORITY_RANGE
MAX_ATTEMPTS_RANGE = rules.MAX_ATTEMPTS_RANGE


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
            raise serializers.ValidationError(
                "run_at needs a UTC offset (like 2030-01-01T12:00:00Z); naive times are ambiguous."
            )
        return super().enforce_timezone(value)


class SubmitSerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=rules.MAX_KIND_CHARS)
    payload = serializers.JSONField()
    queue = serializers.RegexField(
        QUEUE, required=False, default="default", error_messages={"invalid": f"The queue must be {rules.QUEUE_HELP}."}
    )
    priority = StrictIntegerField(required=False, default=0, min_value=PRIORITY_RANGE[0], max_value=PRIORITY_RANGE[1])
    run_at = AwareDateTimeField(required=False, allow_null=True, default=None)
    max_attempts = StrictIntegerField(
        required=False, allow_null=True, default=None, min_value=MAX_ATTEMPTS_RANGE[0], max_value=MAX_ATTEMPTS_RANGE[1]
    )

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)

    def validate_kind(self, value: str) -> str:
        try:
            registry.for_http(value)
        except NotSubmittable as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value

    def validate_payload(self, value: Any) -> dict[str, Any]:
        try:
            rules.payload(value)
        except rules.PayloadTooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None  # a 413, not a 400
        except InvalidJob as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value

    def validate_run_at(self, value: Any) -> Any:
        try:
            return rules.run_at(value)
        except InvalidJob as exc:
            raise serializers.ValidationError(str(exc)) from None


class FilterSerializer(serializers.Serializer):
    """The list's query parameters; any other parameter is a 400, never silently ignored."""

    status = serializers.ChoiceField(choices=JobStatus.values, required=False)
    kind = serializers.CharField(max_length=200, required=False)
    queue = serializers.RegexField(QUEUE, required=False)
    cursor = serializers.CharField(required=False)
    page_size = serializers.IntegerField(required=False, min_value=1, max_value=500)

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
        return super().to_internal_value(data)
