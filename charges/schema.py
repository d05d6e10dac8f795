"""The charge service's part of /v1/schema (see reliableq.api.schema: ChargesConfig names it)."""

from __future__ import annotations

from typing import Any

from reliableq.api.schema import AUTH_ERRORS, ID_PARAM, KEY_HEADER, TIME, UUID, json_response, problem_response, ref

SCHEMAS: dict[str, Any] = {
    "ChargeRequest": {
        "type": "object",
        "required": ["amount", "currency"],
        "additionalProperties": False,
        "properties": {
            "amount": {"type": "integer", "minimum": 1, "maximum": 10**12, "description": "Minor units."},
            "currency": {"type": "string", "pattern": "^[A-Za-z]{3}$"},
            "description": {"type": "string", "maxLength": 500},
        },
    },
    "Charge": {
        "type": "object",
        "required": ["id", "idempotency_key", "amount", "currency", "request_fingerprint", "created_at"],
        "properties": {
            "id": UUID,
            "idempotency_key": {"type": "string"},
            "amount": {"type": "integer"},
            "currency": {"type": "string"},
            "description": {"type": "string"},
            "request_fingerprint": {"type": "string"},
            "created_at": TIME,
        },
    },
}

PATHS: dict[str, Any] = {
    "/v1/charges": {
        "post": {
            "operationId": "createCharge",
            "summary": "Create a charge once per Idempotency-Key.",
            "parameters": [{**KEY_HEADER, "required": True}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("ChargeRequest")}}},
            "responses": {
                "201": json_response("Created.", ref("Charge"), Location="/v1/charges/<id>"),
                "200": json_response(
                    "The original charge for this key and body.", ref("Charge"), Location="/v1/charges/<id>"
                ),
                "400": problem_response("Missing Idempotency-Key or invalid body."),
                "409": problem_response("The key was used with another body."),
                "413": problem_response("The body is larger than the server accepts."),
                "415": problem_response("The body is not JSON."),
                "503": problem_response("Unavailable (fault injection only)."),
                "401": AUTH_ERRORS["401"],
                "403": problem_response(
                    "Missing charges.add_charge, or the CSRF check failed (session authentication)."
                ),
            },
        }
    },
    "/v1/charges/{id}": {
        "get": {
            "operationId": "getCharge",
            "parameters": [ID_PARAM],
            "responses": {
                "200": json_response("The charge.", ref("Charge")),
                "404": problem_response("No such charge."),
                **AUTH_ERRORS,
            },
        }
    },
}


def fragment() -> dict[str, Any]:
    return {"paths": PATHS, "schemas": SCHEMAS}
