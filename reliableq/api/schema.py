"""The OpenAPI 3 document for every route, jobs and charges, written out rather than inferred."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ..models import JobStatus, Outcome
from .base import BaseAPIView
from .. import rules

PROBLEM = "application/problem+json"
UUID = {"type": "string", "format": "uuid"}
TIME = {"type": "string", "format": "date-time"}
NULLABLE_TIME = {"type": "string", "format": "date-time", "nullable": True}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {PROBLEM: {"schema": _ref("Problem")}}}


def _json(description: str, schema: dict[str, Any], **headers: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = {k: {"schema": {"type": "string"}, "description": v} for k, v in headers.items()}
    return response


AUTH_ERRORS = {"401": _problem("Not authenticated."), "403": _problem("Missing permission.")}
ID_PARAM = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
KEY_HEADER = {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string", "maxLength": rules.MAX_KEY_CHARS},
              "description": "Scoped to the submitting user."}

SCHEMAS: dict[str, Any] = {
    "Problem": {
        "type": "object",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "errors": {"type": "object", "additionalProperties": True},
        },
    },
    "Attempt": {
        "type": "object",
        "required": ["number", "worker_id", "lease_token", "started_at", "finished_at", "outcome", "error"],
        "properties": {
            "number": {"type": "integer", "minimum": 1},
            "worker_id": {"type": "string"},
            "lease_token": UUID,
            "started_at": TIME,
            "finished_at": NULLABLE_TIME,
            "outcome": {"type": "string", "enum": list(Outcome.values)},
            "error": {"type": "string"},
        },
    },
    "Job": {
        "type": "object",
        "required": ["id", "kind", "queue", "priority", "payload", "status", "attempt_count", "max_attempts",
                     "run_at", "effect_key", "created_at", "attempts"],
        "properties": {
            "id": UUID,
            "kind": {"type": "string"},
            "queue": {"type": "string"},
            "priority": {"type": "integer"},
            "payload": {"type": "object", "additionalProperties": True},
            "status": {"type": "string", "enum": list(JobStatus.values)},
            "attempt_count": {"type": "integer", "minimum": 0},
            "max_attempts": {"type": "integer", "minimum": 1},
            "run_at": TIME,
            "lease_expires_at": NULLABLE_TIME,
            "worker_id": {"type": "string"},
            "last_error": {"type": "string"},
            "dedupe_key": {"type": "string", "nullable": True, "description": "The submitter's Idempotency-Key."},
            "effect_key": {"type": "string"},
            "submitted_by": {"type": "string", "nullable": True, "description": "Who submitted it over HTTP."},
            "created_at": TIME,
            "updated_at": TIME,
            "finished_at": NULLABLE_TIME,
            "attempts": {"type": "array", "items": _ref("Attempt")},
        },
    },
    "JobSubmission": {
        "type": "object",
        "required": ["kind", "payload"],
        "additionalProperties": False,
        "properties": {
            "kind": {"type": "string", "maxLength": rules.MAX_KIND_CHARS,
                     "description": "A kind whose handler says http=True; Django Tasks kinds never."},
            "payload": {"type": "object", "additionalProperties": True,
                        "description": f"At most MAX_PAYLOAD_BYTES as JSON, nested at most {rules.MAX_PAYLOAD_DEPTH} deep."},
            "queue": {"type": "string", "pattern": rules.QUEUE_PATTERN},
            "priority": {"type": "integer", "minimum": rules.PRIORITY_RANGE[0], "maximum": rules.PRIORITY_RANGE[1]},
            "run_at": {"type": "string", "format": "date-time", "nullable": True,
                       "description": "At most MAX_SCHEDULE_SECONDS ahead; a time in the past means now."},
            "max_attempts": {
                "type": "integer", "nullable": True, "minimum": rules.MAX_ATTEMPTS_RANGE[0], "maximum": rules.MAX_ATTEMPTS_RANGE[1],
            },
        },
    },
    "JobPage": {
        "type": "object",
        "required": ["next", "previous", "results"],
        "properties": {
            "next": {"type": "string", "nullable": True},
            "previous": {"type": "string", "nullable": True},
            "results": {"type": "array", "items": _ref("Job")},
        },
    },
    "Stats": {
        "type": "object",
        "required": ["by_status", "by_kind", "oldest_due_pending_age_seconds", "dead"],
        "properties": {
            "by_status": {"type": "object", "additionalProperties": {"type": "integer"}},
            "by_kind": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}}},
            "oldest_due_pending_age_seconds": {"type": "number", "minimum": 0},
            "dead": {"type": "integer", "minimum": 0},
        },
    },
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
    "/v1/jobs": {
        "post": {
            "operationId": "submitJob",
            "summary": "Submit a job; 202 only once it has committed.",
            "parameters": [KEY_HEADER],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("JobSubmission")}}},
            "responses": {
                "202": _json("Accepted and committed.", _ref("Job"), Location="/v1/jobs/<id>"),
                "200": _json("The job this Idempotency-Key already made.", _ref("Job"), Location="/v1/jobs/<id>"),
                "400": _problem("Invalid body."),
                "409": _problem("The Idempotency-Key was used with another body."),
                "413": _problem("Payload over MAX_PAYLOAD_BYTES."),
                "415": _problem("The body is not JSON."),
                "429": {**_problem("Too many submissions (throttle scope reliableq_submit)."),
                        "headers": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}}},
                "503": _problem("The job could not be stored; nothing was accepted."),
                "401": AUTH_ERRORS["401"],
                "403": _problem("Missing reliableq.submit_job, or the CSRF check failed (session authentication)."),
            },
        },
        "get": {
            "operationId": "listJobs",
            "summary": "Jobs, newest first, cursor-paginated.",
            "parameters": [
                {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(JobStatus.values)}},
                {"name": "kind", "in": "query", "schema": {"type": "string", "maxLength": 200}},
                {"name": "queue", "in": "query", "schema": {"type": "string", "pattern": rules.QUEUE_PATTERN}},
                {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                {"name": "page_size", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
            ],
            "responses": {"200": _json("A page of jobs.", _ref("JobPage")), "400": _problem("Bad filter or an unknown query parameter."), **AUTH_ERRORS},
        },
    },
    "/v1/jobs/{id}": {
        "get": {
            "operationId": "getJob",
            "parameters": [ID_PARAM],
            "responses": {"200": _json("The job and its attempts.", _ref("Job")), "404": _problem("No such job."), **AUTH_ERRORS},
        }
    },
    "/v1/jobs/{id}/replay": {
        "post": {
            "operationId": "replayJob",
            "summary": "Send a DEAD job back to PENDING: same id, same effect key, history kept.",
            "parameters": [ID_PARAM],
            "responses": {
                "202": _json("Replayed.", _ref("Job")),
                "404": _problem("No such job."),
                "409": _problem("The job is not DEAD."),
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/jobs/{id}/cancel": {
        "post": {
            "operationId": "cancelJob",
            "parameters": [ID_PARAM],
            "responses": {
                "200": _json("Cancelled.", _ref("Job")),
                "404": _problem("No such job."),
                "409": _problem("The job is not PENDING."),
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/stats": {
        "get": {"operationId": "stats", "responses": {"200": _json("Queue health.", _ref("Stats")), **AUTH_ERRORS}}
    },
    "/v1/charges": {
        "post": {
            "operationId": "createCharge",
            "summary": "Create a charge once per Idempotency-Key.",
            "parameters": [{**KEY_HEADER, "required": True}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("ChargeRequest")}}},
            "responses": {
                "201": _json("Created.", _ref("Charge"), Location="/v1/charges/<id>"),
                "200": _json("The original charge for this key and body.", _ref("Charge"), Location="/v1/charges/<id>"),
                "400": _problem("Missing Idempotency-Key or invalid body."),
                "409": _problem("The key was used with another body."),
                "413": _problem("The body is larger than the server accepts."),
                "415": _problem("The body is not JSON."),
                "503": _problem("Unavailable (fault injection only)."),
                "401": AUTH_ERRORS["401"],
                "403": _problem("Missing charges.add_charge, or the CSRF check failed (session authentication)."),
            },
        }
    },
    "/v1/charges/{id}": {
        "get": {
            "operationId": "getCharge",
            "parameters": [ID_PARAM],
            "responses": {"200": _json("The charge.", _ref("Charge")), "404": _problem("No such charge."), **AUTH_ERRORS},
        }
    },
    "/v1/ready": {
        "get": {
            "operationId": "ready",
            "summary": "Readiness: the database answers and is migrated. No login needed.",
            "security": [],
            "responses": {
                "200": _json("Ready.", {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}}),
                "503": _problem("Not ready: the detail says why."),
            },
        }
    },
    "/v1/metrics": {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus text format, read from PostgreSQL: the whole fleet.",
            "responses": {
                "200": {"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}},
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/schema": {
        "get": {
            "operationId": "schema",
            "security": [],
            "responses": {"200": {"description": "This document.", "content": {"application/json": {"schema": {"type": "object"}}}}},
        }
    },
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "ReliableQ", "version": "1", "description": "Durable jobs and an idempotent charge service."},
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Token <key>"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            },
        },
        "security": [{"token": []}, {"session": []}],
    }


class SchemaView(BaseAPIView):
    """The schema itself needs no login: clients and fuzzers read it first."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    def get(self, request: Request) -> Response:
        return Response(document())
