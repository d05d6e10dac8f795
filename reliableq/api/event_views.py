"""POST /v1/events/<name>: emit an event over HTTP (reliableq.emit_event, a name of HTTP_EVENTS)."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from .. import events, rules
from ..errors import InvalidJob
from ..models import Event
from . import problems
from .base import BaseAPIView
from .documents import time
from .throttles import SubmitThrottle
from .views import _body_fields, charge


def document(event: Event) -> dict[str, Any]:
    """The event as first recorded, and how many jobs this request woke (0 when it was emitted before)."""
    return {
        "name": event.name,
        "payload": events.payload_of(event),
        "emitted_at": time(event.emitted_at),
        "woken": int(getattr(event, "woken", 0)),
    }


class EventEmitView(BaseAPIView):
    """202 with the event it recorded; 200 with the first record when the name was emitted before."""

    needs = {"*": "emit_event"}

    def get_throttles(self) -> list[Any]:
        # An emit counts as one submission: a caller who floods emits floods the same budget.
        return [SubmitThrottle()]

    def post(self, request: Request, name: str) -> Response:
        charge(self, request, 1)
        body = _body_fields(request, ("payload",))
        try:
            event = events.emit_over_http(name, body.get("payload"), by=request.user)
        except rules.PayloadTooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        except InvalidJob as exc:
            raise exceptions.ValidationError({exc.field: [str(exc)]}) from None
        except DatabaseError:
            raise problems.ServiceUnavailable("The event could not be stored; nothing was woken. Try again.") from None
        code = status.HTTP_202_ACCEPTED if getattr(event, "made", False) else status.HTTP_200_OK
        return Response(document(event), status=code)


# Merged into the OpenAPI document (reliableq.api.schema).
SCHEMAS: dict[str, Any] = {
    "EventEmit": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "payload": {
                "type": "object",
                "nullable": True,
                "additionalProperties": True,
                "description": "At most MAX_PAYLOAD_BYTES as JSON; what the waiting jobs' wait_for returns.",
            }
        },
    },
    "Event": {
        "type": "object",
        "required": ["name", "payload", "emitted_at", "woken"],
        "properties": {
            "name": {"type": "string"},
            "payload": {"type": "object", "nullable": True, "additionalProperties": True},
            "emitted_at": {"type": "string", "format": "date-time"},
            "woken": {
                "type": "integer",
                "minimum": 0,
                "description": "The jobs this request made PENDING; 0 when the name was emitted before.",
            },
        },
    },
}

PATHS: dict[str, Any] = {
    "/v1/events/{name}": {
        "post": {
            "operationId": "emitEvent",
            "summary": "Emit the event `name`: every job waiting for it becomes PENDING. Once per name. Audited.",
            "parameters": [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "maxLength": events.MAX_NAME_CHARS},
                    "description": "A name matched by a pattern of RELIABLEQ['HTTP_EVENTS'].",
                }
            ],
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EventEmit"}}},
            },
        }
    }
}
