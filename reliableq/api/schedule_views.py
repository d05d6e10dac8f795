"""GET /v1/schedules: every schedule, by name, a page at a time (reliableq.view_schedule)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from .. import schedules
from ..errors import InvalidJob
from ..models import Schedule
from .base import BaseAPIView
from .documents import time
from .throttles import ReadThrottle

PAGE, MAX_PAGE = 100, 500


def document(schedule: Schedule) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "kind": schedule.kind,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "last_slot": time(schedule.last_slot),
        "next_slot": time(schedule.next_slot),
    }


class ScheduleListView(BaseAPIView):
    query_parameters = frozenset({"after", "page_size"})
    throttle_classes = [ReadThrottle]
    needs = {"*": "view_schedule"}

    def get(self, request: Request) -> Response:
        after = request.query_params.get("after", "")
        try:
            if after:
                schedules.check_name(after, field="after")
        except InvalidJob as exc:
            raise exceptions.ValidationError({"after": [str(exc)]}) from None
        size = request.query_params.get("page_size", str(PAGE))
        if not size.isdigit() or not 1 <= int(size) <= MAX_PAGE:
            raise exceptions.ValidationError({"page_size": [f"page_size must be an integer from 1 to {MAX_PAGE}."]})
        page, last = schedules.page(after=after, limit=int(size))
        next_url = None
        if last is not None:
            next_url = request.build_absolute_uri(f"{request.path}?{urlencode({'after': last, 'page_size': size})}")
        return Response({"schedules": [document(s) for s in page], "next": next_url})


NULLABLE_TIME = {"type": "string", "format": "date-time", "nullable": True}

# Merged into the OpenAPI document (reliableq.api.schema).
SCHEMAS: dict[str, Any] = {
    "Schedule": {
        "type": "object",
        "required": ["name", "kind", "cron", "timezone", "enabled", "last_slot", "next_slot"],
        "properties": {
            "name": {"type": "string"},
            "kind": {"type": "string"},
            "cron": {"type": "string", "description": "Five fields, or six with seconds first."},
            "timezone": {"type": "string", "description": "The IANA zone its slots are local times of."},
            "enabled": {"type": "boolean"},
            "last_slot": {**NULLABLE_TIME, "description": "The newest slot a job was made for."},
            "next_slot": {**NULLABLE_TIME, "description": "The next slot to make a job for; null while disabled."},
        },
    },
    "ScheduleList": {
        "type": "object",
        "required": ["schedules", "next"],
        "properties": {
            "schedules": {"type": "array", "items": {"$ref": "#/components/schemas/Schedule"}},
            "next": {"type": "string", "nullable": True, "description": "The next page's URL; null on the last."},
        },
    },
}

PATHS: dict[str, Any] = {
    "/v1/schedules": {
        "get": {
            "operationId": "listSchedules",
            "summary": "Every schedule (declared in code or made in the admin), by name, a page at a time.",
            "parameters": [
                {"name": "after", "in": "query", "schema": {"type": "string"}, "description": "After this name."},
                {"name": "page_size", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}},
            ],
        }
    }
}
