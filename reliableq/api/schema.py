"""The OpenAPI 3 document, written out rather than inferred: ReliableQ's routes, and those of any
installed app whose AppConfig names a fragment (`reliableq_openapi = "app.schema.fragment"`, a
callable returning {"paths": ..., "schemas": ...}), as the bundled charges app does."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.utils.module_loading import import_string
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from .. import rules
from ..models import JobStatus, Outcome, StepKind
from . import event_views, schedule_views
from .base import BaseAPIView

PROBLEM = "application/problem+json"
UUID = {"type": "string", "format": "uuid"}
TIME = {"type": "string", "format": "date-time"}
NULLABLE_TIME = {"type": "string", "format": "date-time", "nullable": True}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def problem_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": {PROBLEM: {"schema": ref("Problem")}}}


def json_response(description: str, schema: dict[str, Any], **headers: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = {k: {"schema": {"type": "string"}, "description": v} for k, v in headers.items()}
    return response


AUTH_ERRORS = {"401": problem_response("Not authenticated."), "403": problem_response("Missing permission.")}
ID_PARAM = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
NAME_PARAM = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}, "description": "A queue."}
KEY_HEADER = {
    "name": "Idempotency-Key",
    "in": "header",
    "schema": {"type": "string", "maxLength": rules.MAX_KEY_CHARS},
    "description": "Scoped to the submitting user.",
}

# A job's fields as POST /v1/jobs takes them; a workflow's members and callbacks take them too.
_JOB_FIELDS: dict[str, Any] = {
    "kind": {
        "type": "string",
        "maxLength": rules.MAX_KIND_CHARS,
        "description": "A kind whose handler says http=True; Django Tasks kinds never.",
    },
    "payload": {
        "type": "object",
        "additionalProperties": True,
        "description": f"At most MAX_PAYLOAD_BYTES as JSON, nested at most {rules.MAX_PAYLOAD_DEPTH} deep.",
    },
    "queue": {"type": "string", "pattern": rules.QUEUE_PATTERN},
    "priority": {"type": "integer", "minimum": rules.PRIORITY_RANGE[0], "maximum": rules.PRIORITY_RANGE[1]},
    "run_at": {
        "type": "string",
        "format": "date-time",
        "nullable": True,
        "description": "At most MAX_SCHEDULE_SECONDS ahead; a time in the past means now.",
    },
    "max_attempts": {
        "type": "integer",
        "nullable": True,
        "minimum": rules.MAX_ATTEMPTS_RANGE[0],
        "maximum": rules.MAX_ATTEMPTS_RANGE[1],
    },
    "unique_key": {
        "type": "string",
        "nullable": True,
        "minLength": 1,
        "maxLength": rules.MAX_KEY_CHARS,
        "description": "While a job of this kind with this key, submitted by you, is PENDING or RUNNING, "
        "submitting answers 200 with that job instead of making another. Not accepted in a batch.",
    },
}

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
            "traceback": {
                "type": "string",
                "description": "A failed attempt's traceback, redacted and bounded (empty otherwise); only "
                "for users holding reliableq.view_job.",
            },
        },
    },
    "Step": {
        "type": "object",
        "required": ["name", "kind", "attempt", "at"],
        "properties": {
            "name": {"type": "string"},
            "kind": {"type": "string", "enum": list(StepKind.values)},
            "attempt": {"type": "integer", "minimum": 1, "description": "The attempt that recorded it (last)."},
            "at": {**TIME, "description": "When it was recorded (a checkpoint: last saved)."},
            "value": {
                "nullable": True,
                "description": "The recorded JSON value; only for users holding reliableq.view_job.",
            },
        },
    },
    "Job": {
        "type": "object",
        "required": [
            "id",
            "kind",
            "queue",
            "priority",
            "payload",
            "status",
            "attempt_count",
            "max_attempts",
            "run_at",
            "effect_key",
            "created_at",
            "attempts",
        ],
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
            "concurrency_key": {
                "type": "string",
                "nullable": True,
                "description": "With the handler's max_running_per_key: at most that many RUNNING per key.",
            },
            "fair_key": {
                "type": "string",
                "nullable": True,
                "description": "With the handler's fair=True, claims rotate among keys (over HTTP: the submitter).",
            },
            "unique_key": {
                "type": "string",
                "nullable": True,
                "description": "At most one PENDING or RUNNING job per kind and key (per submitter).",
            },
            "snoozes": {"type": "integer", "minimum": 0, "description": "How often the handler snoozed it."},
            "cancel_requested": {
                "type": "boolean",
                "description": "An operator asked the running handler to stop; it ends CANCELLED when it does.",
            },
            "progress": {
                "type": "object",
                "nullable": True,
                "description": "What the running handler last reported with job.progress(): done, total, note, at.",
            },
            "result": {
                "nullable": True,
                "description": "The handler's return value, for a SUCCEEDED job of a kind with keep_result=True.",
            },
            "waiting_for": {
                "type": "string",
                "nullable": True,
                "description": "The event a WAITING job waits for (job.wait_for); null otherwise.",
            },
            "waiting_until": {
                **NULLABLE_TIME,
                "description": "When that wait times out (wait_for raises WaitTimeout); null: it waits without one.",
            },
            "steps": {
                "type": "array",
                "items": ref("Step"),
                "description": "One job's answers only: what it recorded, oldest first, at most 1,000.",
            },
            "step_count": {"type": "integer", "minimum": 0, "description": "How many names the job recorded."},
            "created_at": TIME,
            "updated_at": TIME,
            "finished_at": NULLABLE_TIME,
            "attempts": {"type": "array", "items": ref("Attempt")},
        },
    },
    "JobSubmission": {
        "type": "object",
        "required": ["kind", "payload"],
        "additionalProperties": False,
        "properties": _JOB_FIELDS,
    },
    "WorkflowMember": {
        "type": "object",
        "required": ["name", "kind", "payload"],
        "additionalProperties": False,
        "properties": {
            **{k: v for k, v in _JOB_FIELDS.items() if k != "unique_key"},
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "after": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Names of members of this workflow.",
            },
            "on_upstream_failure": {"type": "string", "enum": ["cancel", "run"]},
        },
    },
    "WorkflowSubmission": {
        "type": "object",
        "required": ["members"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "maxLength": 200},
            "members": {"type": "array", "minItems": 1, "maxItems": 10000, "items": ref("WorkflowMember")},
            "callbacks": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    event: {
                        "type": "object",
                        "required": ["kind", "payload"],
                        "additionalProperties": False,
                        "properties": {
                            k: v
                            for k, v in _JOB_FIELDS.items()
                            if k in ("kind", "payload", "queue", "priority", "max_attempts")
                        },
                    }
                    for event in ("success", "failure", "complete")
                },
            },
        },
    },
    "Workflow": {
        "type": "object",
        "required": ["id", "name", "status", "run", "members", "callbacks", "next"],
        "properties": {
            "id": UUID,
            "name": {"type": "string"},
            "status": {"type": "string", "enum": ["RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]},
            "run": {"type": "integer"},
            "cancel_requested": {"type": "boolean"},
            "created_at": TIME,
            "finished_at": NULLABLE_TIME,
            "members": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "id": UUID,
                        "kind": {"type": "string"},
                        "status": {"type": "string", "enum": list(JobStatus.values)},
                        "after": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
            "callbacks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "event": {"type": "string"},
                        "run": {"type": "integer", "nullable": True},
                        "id": UUID,
                        "kind": {"type": "string"},
                        "status": {"type": "string"},
                    },
                },
            },
            "next": {
                "type": "string",
                "nullable": True,
                "description": "The URL of the next page of members; null on the last.",
            },
        },
    },
    "JobBatch": {
        "type": "object",
        "required": ["jobs"],
        "additionalProperties": False,
        "properties": {
            "jobs": {"type": "array", "minItems": 1, "maxItems": 1000, "items": ref("JobSubmission")},
        },
    },
    "JobBatchResult": {
        "type": "object",
        "required": ["jobs"],
        "properties": {"jobs": {"type": "array", "items": ref("Job")}},
    },
    "JobPage": {
        "type": "object",
        "required": ["next", "previous", "results"],
        "properties": {
            "next": {"type": "string", "nullable": True},
            "previous": {"type": "string", "nullable": True},
            "results": {"type": "array", "items": ref("Job")},
        },
    },
    "Stats": {
        "type": "object",
        "required": ["by_status", "by_kind", "oldest_due_pending_age_seconds", "dead", "paused", "throttled"],
        "properties": {
            "by_status": {"type": "object", "additionalProperties": {"type": "integer"}},
            "by_kind": {
                "type": "object",
                "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
            "oldest_due_pending_age_seconds": {"type": "number", "minimum": 0},
            "dead": {"type": "integer", "minimum": 0},
            "paused": {"type": "integer", "minimum": 0, "description": "Due PENDING jobs in queues paused now."},
            "throttled": {
                "type": "integer",
                "minimum": 0,
                "description": "Due PENDING jobs in running queues whose kind is at its max_running or rate_limit, "
                "or whose concurrency_key is at its kind's max_running_per_key, now.",
            },
        },
    },
    "Queue": {
        "type": "object",
        "required": ["name", "paused", "paused_until", "pending", "running", "oldest_due_age_seconds"],
        "properties": {
            "name": {"type": "string", "pattern": rules.QUEUE_PATTERN},
            "paused": {"type": "boolean", "description": "No worker claims its jobs now; running ones finish."},
            "paused_until": {**NULLABLE_TIME, "description": "When the pause ends by itself; null: until resumed."},
            "paused_by": {"type": "string", "nullable": True, "description": "Who paused it."},
            "pending": {"type": "integer", "minimum": 0, "description": "PENDING jobs, due or scheduled later."},
            "running": {"type": "integer", "minimum": 0},
            "oldest_due_age_seconds": {"type": "number", "minimum": 0},
        },
    },
    "QueueList": {
        "type": "object",
        "required": ["queues", "next"],
        "properties": {
            "queues": {"type": "array", "items": ref("Queue")},
            "next": {"type": "string", "nullable": True, "description": "The next page's URL; null on the last."},
        },
    },
    "QueueState": {
        "type": "object",
        "required": ["name", "paused", "paused_until"],
        "description": "A queue's pause state; its counts too for users with reliableq.view_job.",
        "properties": {
            "name": {"type": "string", "pattern": rules.QUEUE_PATTERN},
            "paused": {"type": "boolean"},
            "paused_until": NULLABLE_TIME,
            "paused_by": {"type": "string", "nullable": True},
            "pending": {"type": "integer", "minimum": 0},
            "running": {"type": "integer", "minimum": 0},
            "oldest_due_age_seconds": {"type": "number", "minimum": 0},
        },
    },
    "QueuePause": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "until": {
                "type": "string",
                "format": "date-time",
                "nullable": True,
                "description": "With a UTC offset; at most MAX_SCHEDULE_SECONDS ahead. Absent or null: until resumed.",
            }
        },
    },
}

PATHS: dict[str, Any] = {
    "/v1/jobs": {
        "post": {
            "operationId": "submitJob",
            "summary": "Submit a job; 202 only once it has committed.",
            "parameters": [KEY_HEADER],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("JobSubmission")}}},
            "responses": {
                "202": json_response("Accepted and committed.", ref("Job"), Location="/v1/jobs/<id>"),
                "200": json_response(
                    "The job this Idempotency-Key already made, or your PENDING or RUNNING job of the kind with this "
                    "unique_key.",
                    ref("Job"),
                    Location="/v1/jobs/<id>",
                ),
                "400": problem_response("Invalid body."),
                "409": problem_response("The Idempotency-Key was used with another body."),
                "413": problem_response("Payload over MAX_PAYLOAD_BYTES."),
                "415": problem_response("The body is not JSON."),
                "429": {
                    **problem_response("Too many submissions (throttle scope reliableq_submit)."),
                    "headers": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}},
                },
                "503": problem_response("The job could not be stored; nothing was accepted."),
                "401": AUTH_ERRORS["401"],
                "403": problem_response(
                    "Missing reliableq.submit_job, or the CSRF check failed (session authentication)."
                ),
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
            "responses": {
                "200": json_response("A page of jobs.", ref("JobPage")),
                "400": problem_response("Bad filter or an unknown query parameter."),
                **AUTH_ERRORS,
            },
        },
    },
    "/v1/workflows": {
        "post": {
            "operationId": "submitWorkflow",
            "summary": "Submit a workflow (up to 10,000 members and its callbacks) in one transaction.",
            "parameters": [KEY_HEADER],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("WorkflowSubmission")}}},
            "responses": {
                "202": json_response("Accepted and committed.", ref("Workflow"), Location="/v1/workflows/<id>"),
                "200": json_response("The same Idempotency-Key and body again: the same workflow.", ref("Workflow")),
                "400": problem_response(
                    "A bad member, an unknown or repeated name, a cycle: `errors` names each (members[3].after)."
                ),
                "401": AUTH_ERRORS["401"],
                "403": problem_response("Missing reliableq.submit_job, or a member's kind is not open to HTTP."),
                "409": problem_response("The Idempotency-Key was used with another body."),
                "413": problem_response(
                    "Over 10,000 members or 100,000 `after` entries, a payload over MAX_PAYLOAD_BYTES, or a cost "
                    "(the members, or the `after` entries when more) over a whole window of reliableq_submit's "
                    "rate: raise the rate or split the workflow."
                ),
                "415": problem_response("The body is not JSON."),
                "429": {
                    **problem_response("Too many submissions, or MAX_PENDING_PER_SUBMITTER unfinished jobs held."),
                    "headers": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}},
                },
                "503": problem_response("The workflow could not be stored; nothing was made."),
            },
        }
    },
    "/v1/workflows/{id}": {
        "get": {
            "operationId": "getWorkflow",
            "summary": "The workflow, a page of its members (by id, with their `after` names), the callbacks fired.",
            "parameters": [
                ID_PARAM,
                {"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "From `next`."},
                {"name": "page_size", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
            ],
            "responses": {
                "200": json_response(
                    "A page: at most page_size members (default 1,000), fewer once their `after` lists reach "
                    "10,000 names.",
                    ref("Workflow"),
                ),
                "400": problem_response("An unknown query parameter, or a bad `cursor` or `page_size`."),
                "404": problem_response("No such workflow (or another user's, without reliableq.view_job)."),
                "429": {
                    **problem_response("Too many reads (throttle scope reliableq_read)."),
                    "headers": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}},
                },
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/workflows/{id}/cancel": {
        "post": {
            "operationId": "cancelWorkflow",
            "summary": "Cancel WAITING and PENDING members; ask RUNNING ones to stop.",
            "parameters": [ID_PARAM],
            "responses": {
                "200": json_response("The workflow.", ref("Workflow")),
                "404": problem_response("No such workflow."),
                "409": problem_response("The workflow has finished."),
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/jobs/batch": {
        "post": {
            "operationId": "submitJobs",
            "summary": "Submit up to 1,000 jobs in one transaction: all are committed, or none.",
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("JobBatch")}}},
            "responses": {
                "202": json_response("All accepted and committed, in the order given.", ref("JobBatchResult")),
                "400": problem_response("Invalid items; `errors` names each by index (jobs[3].kind). Nothing stored."),
                "413": problem_response(
                    "A payload over MAX_PAYLOAD_BYTES, a body over what the server accepts, or more jobs than a whole "
                    "window of reliableq_submit's rate admits (raise the rate or split the batch)."
                ),
                "415": problem_response("The body is not JSON."),
                "429": {
                    **problem_response("Too many submissions (throttle scope reliableq_submit)."),
                    "headers": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}},
                },
                "503": problem_response("The jobs could not be stored; none was accepted."),
                "401": AUTH_ERRORS["401"],
                "403": problem_response("Missing reliableq.submit_job, or the CSRF check failed."),
            },
        }
    },
    "/v1/jobs/{id}": {
        "get": {
            "operationId": "getJob",
            "parameters": [ID_PARAM],
            "responses": {
                "200": json_response("The job and its attempts.", ref("Job")),
                "404": problem_response("No such job."),
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/jobs/{id}/replay": {
        "post": {
            "operationId": "replayJob",
            "summary": "Send a DEAD job back to PENDING: same id, same effect key, history kept.",
            "parameters": [ID_PARAM],
            "responses": {
                "202": json_response("Replayed.", ref("Job")),
                "404": problem_response("No such job."),
                "409": problem_response("The job is not DEAD."),
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/jobs/{id}/cancel": {
        "post": {
            "operationId": "cancelJob",
            "parameters": [ID_PARAM],
            "responses": {
                "200": json_response("Cancelled (it was PENDING).", ref("Job")),
                "202": json_response(
                    "Cancel requested (it is RUNNING): cancel_requested is true; it ends CANCELLED once its handler "
                    "stops.",
                    ref("Job"),
                ),
                "404": problem_response("No such job."),
                "409": problem_response("The job has finished."),
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/queues": {
        "get": {
            "operationId": "listQueues",
            "summary": "Queues with jobs or a pause state, by name, a page at a time: pause state and unfinished work.",
            "parameters": [
                {
                    "name": "after",
                    "in": "query",
                    "schema": {"type": "string"},
                    "description": "List queues after this name.",
                },
                {"name": "page_size", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
            ],
            "responses": {
                "200": json_response("The queues, by name.", ref("QueueList")),
                "400": problem_response("An unknown query parameter, or a bad `after` or `page_size`."),
                **AUTH_ERRORS,
            },
        }
    },
    "/v1/queues/{name}/pause": {
        "post": {
            "operationId": "pauseQueue",
            "summary": "Stop claims from the queue (until `until`, or until resumed); running jobs finish. Audited.",
            "parameters": [NAME_PARAM],
            "requestBody": {"required": False, "content": {"application/json": {"schema": ref("QueuePause")}}},
            "responses": {
                "200": json_response("The queue, paused.", ref("QueueState")),
                "400": problem_response("A bad queue name, a bad `until`, or an unknown field or query parameter."),
                "415": problem_response("The body is not JSON."),
                "401": AUTH_ERRORS["401"],
                "403": problem_response("Missing reliableq.pause_queue, or the CSRF check failed."),
            },
        }
    },
    "/v1/queues/{name}/resume": {
        "post": {
            "operationId": "resumeQueue",
            "summary": "Let workers claim the queue's jobs again, and wake them. Audited.",
            "parameters": [NAME_PARAM],
            "responses": {
                "200": json_response("The queue, running.", ref("QueueState")),
                "400": problem_response("A bad queue name, a body with fields, or an unknown query parameter."),
                "415": problem_response("The body is not JSON."),
                "401": AUTH_ERRORS["401"],
                "403": problem_response("Missing reliableq.pause_queue, or the CSRF check failed."),
            },
        }
    },
    "/v1/stats": {
        "get": {
            "operationId": "stats",
            "responses": {"200": json_response("Queue health.", ref("Stats")), **AUTH_ERRORS},
        }
    },
    "/v1/ready": {
        "get": {
            "operationId": "ready",
            "summary": "Readiness: the database answers and is migrated. No login needed.",
            "security": [],
            "responses": {
                "200": json_response(
                    "Ready.", {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}}
                ),
                "503": problem_response("Not ready: the detail says why."),
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
            "responses": {
                "200": {
                    "description": "This document.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    },
}


def document() -> dict[str, Any]:
    paths = {**PATHS, **schedule_paths(), **event_paths()}
    schemas = {**SCHEMAS, **schedule_views.SCHEMAS, **event_views.SCHEMAS}
    for config in apps.get_app_configs():
        name = getattr(config, "reliableq_openapi", None)
        if name:
            fragment = import_string(name)()
            paths.update(fragment.get("paths", {}))
            schemas.update(fragment.get("schemas", {}))
    return {
        "openapi": "3.0.3",
        "info": {"title": "ReliableQ", "version": "1", "description": "Durable jobs for Django on PostgreSQL."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Token <key>"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            },
        },
        "security": [{"token": []}, {"session": []}],
    }


def schedule_paths() -> dict[str, Any]:
    """GET /v1/schedules, with the answers every route documents."""
    get = schedule_views.PATHS["/v1/schedules"]["get"]
    responses = {
        "200": json_response("The schedules, by name.", ref("ScheduleList")),
        "400": problem_response("An unknown query parameter, or a bad `after` or `page_size`."),
        "401": AUTH_ERRORS["401"],
        "403": problem_response("Missing reliableq.view_schedule."),
    }
    return {"/v1/schedules": {"get": {**get, "responses": responses}}}


def event_paths() -> dict[str, Any]:
    """POST /v1/events/{name}, with the answers every route documents."""
    post = event_views.PATHS["/v1/events/{name}"]["post"]
    responses = {
        "202": json_response("Recorded and committed, with the number of jobs it woke.", ref("Event")),
        "200": json_response("The name was emitted before: the first event; nothing woken.", ref("Event")),
        "400": problem_response(
            "A bad name or body, an unknown field or query parameter, or a name no pattern of HTTP_EVENTS matches."
        ),
        "401": AUTH_ERRORS["401"],
        "403": problem_response("Missing reliableq.emit_event, or the CSRF check failed."),
        "413": problem_response(
            "A payload over MAX_PAYLOAD_BYTES, or a body over what the server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE)."
        ),
        "415": problem_response("The body is not JSON."),
        "429": {
            **problem_response("Too many requests (throttle scope reliableq_submit: an emit counts one)."),
            "headers": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}},
        },
        "503": problem_response("The event could not be stored; nothing was woken."),
    }
    return {"/v1/events/{name}": {"post": {**post, "responses": responses}}}


class SchemaView(BaseAPIView):
    """The schema itself needs no login: clients and fuzzers read it first."""

    permission_classes = [AllowAny]
    authentication_classes: list[Any] = []

    def get(self, request: Request) -> Response:
        return Response(document())
