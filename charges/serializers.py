from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from .models import Charge

CURRENCY = re.compile(r"\A[A-Za-z]{3}\Z")  # \Z: "$" would take "EUR\n"
MAX_AMOUNT = 10**12  # minor units; BIGINT holds far more, but no sane charge is larger


class ChargeRequestSerializer(serializers.Serializer[Any]):
    amount = serializers.IntegerField(min_value=1, max_value=MAX_AMOUNT)
    currency = serializers.RegexField(CURRENCY, error_messages={"invalid": "A three-letter ISO 4217 code, like EUR."})
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)

    def validate_amount(self, value: Any) -> int:
        if isinstance(self.initial_data.get("amount"), (bool, float, str)):
            raise serializers.ValidationError("An integer number of minor units (no decimals, no strings).")
        return int(value)


class ChargeSerializer(serializers.ModelSerializer[Any]):
    class Meta:
        model = Charge
        fields = ["id", "idempotency_key", "amount", "currency", "description", "request_fingerprint", "created_at"]
        read_only_fields = fields
