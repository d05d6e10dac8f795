"""The framework's ceilings for the HTTP benchmark (bench/http.py), served only when
TESTPROJECT_BENCH_VIEWS=1: they take no login, so no other server of this project has them.

- /bench/noop: a Django view that answers 202 and touches no database;
- /bench/insert: a Django view that makes the same INSERT as POST /v1/jobs (services.submit, one
  autocommit statement) with none of the API's work (authentication, permissions, throttling,
  validation, the job's document);
- /bench/drf-insert: the same, as a view of the API's own DRF base class with no login: what DRF's
  request, parsing and response cost before the API does anything of its own.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from reliableq import services
from reliableq.api.base import BaseAPIView


@csrf_exempt
def noop(request: HttpRequest) -> HttpResponse:
    return HttpResponse(status=202)


@csrf_exempt
def insert(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body)
    job, _ = services.submit(data["kind"], data["payload"], queue=data.get("queue", "default"))
    return JsonResponse({"id": str(job.id)}, status=202)


class DRFInsert(BaseAPIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        data = request.data
        job, _ = services.submit(data["kind"], data["payload"], queue=data.get("queue", "default"))
        return Response({"id": str(job.id)}, status=202)


urlpatterns = [path("bench/noop", noop), path("bench/insert", insert), path("bench/drf-insert", DRFInsert.as_view())]
