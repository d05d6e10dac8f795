"""The job list's query parameters (submissions are read by reliableq.api.submission)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .. import rules
from ..models import JobStatus


class FilterSerializer(serializers.Serializer[Any]):
    """The list's query parameters; any other parameter is a 400, never silently ignored."""

    status = serializers.ChoiceField(choices=JobStatus.values, required=False)
    kind = serializers.CharField(max_length=rules.MAX_KIND_CHARS, required=False)
    queue = serializers.RegexField(rules.QUEUE, required=False)
    cursor = serializers.CharField(required=False)
    page_size = serializers.IntegerField(required=False, min_value=1, max_value=500)

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
        return super().to_internal_value(data)
