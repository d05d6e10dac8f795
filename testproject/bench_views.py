"""The framework's ceilings for the HTTP benchmark (bench/http.py), served only when
TESTPROJECT_BENCH_VIEWS holds a key of at least 32 characters, and answered only to requests that
send it back (X-Bench-Key): they take no login, so an inherited variable alone opens nothing. They
submit only kinds open to HTTP (http=True), on queues open to HTTP, as POST /v1/jobs does.

- /bench/noop: a Django view that answers 202 and touches no database;
- /bench/insert: a Django view that makes the same INSERT as POST /v1/jobs (services.submit, one
  autocommit statement) with none of the API's work (authentication, permissions, throttling,
  validation, the job's document);
- /bench/drf-insert: the same, as a view of the API's own DRF base class with no login: what DRF's
  request, parsing and response cost before the API does anything of its own.
"""

from __future__ import annotations

import hmac
import json
import os

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from reliableq import registry, rules, services
from reliableq.api.base import BaseAPIView
from reliableq.errors import InvalidJob, NotSubmittable
from reliableq.options import JobOptions

MIN_KEY_CHARS = 32


def key() -> str | None:
    """The key that opens these views, or None (then testproject.urls does not serve them)."""
    found = os.environ.get("TESTPROJECT_BENCH_VIEWS", "")
    return found if len(found) >= MIN_KEY_CHARS else None


def _opened(request: HttpRequest) -> bool:
    expected = key()
    return expected is not None and hmac.compare_digest(request.META.get("HTTP_X_BENCH_KEY", ""), expected)


def _submit(data: dict) -> str | None:
    """The new job's id, or None when POST /v1/jobs would refuse it (a kind not open to HTTP, a queue)."""
    kind = data["kind"]
    try:
        registry.for_http(kind)
        options = JobOptions(queue=rules.http_queue(data.get("queue", "default")))
        job, _ = services.submit(kind, data["payload"], options)
    except (NotSubmittable, InvalidJob):
        return None
    return str(job.id)


@csrf_exempt
def noop(request: HttpRequest) -> HttpResponse:
    if not _opened(request):
        return HttpResponse(status=404)
    return HttpResponse(status=202)


@csrf_exempt
def insert(request: HttpRequest) -> HttpResponse:
    if not _opened(request):
        return HttpResponse(status=404)
    made = _submit(json.loads(request.body))
    return JsonResponse({"id": made}, status=202) if made else HttpResponse(status=400)


class DRFInsert(BaseAPIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        if not _opened(request._request):
            return Response(status=404)
        made = _submit(request.data)
        return Response({"id": made}, status=202) if made else Response(status=400)


urlpatterns = [path("bench/noop", noop), path("bench/insert", insert), path("bench/drf-insert", DRFInsert.as_view())]
