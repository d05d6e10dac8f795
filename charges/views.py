"""POST /v1/charges and GET /v1/charges/<id>: validate, call the service, answer."""

from __future__ import annotations

import uuid

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from reliableq.api.base import BaseAPIView, requires
from reliableq.api.problems import Conflict, ServiceUnavailable, problem
from reliableq.api.throttles import WindowThrottle

from . import faults, services
from .models import Charge, ChargeRequest
from .serializers import ChargeRequestSerializer, ChargeSerializer

MAX_KEY = 255


class ChargeThrottle(WindowThrottle):
    """Charges per account (the charge job's service account), scope `charges`."""

    scope = "charges"
    default_rate = "300/s"


class ChargeListView(BaseAPIView):
    """Making charges is a permission of its own (charges.add_charge): the charge job's service
    account holds it, a user who may submit jobs does not, so nobody can pre-empt a job's charge
    by sending its effect key first."""

    permission_classes = [*BaseAPIView.permission_classes, requires("charges.add_charge")]
    throttle_classes = [ChargeThrottle]

    def post(self, request: Request) -> Response:
        key = request.headers.get("Idempotency-Key", "")
        # A request without a usable key is refused before anything is written: no row for it.
        if not key:
            return problem(400, "The Idempotency-Key header is required.", code="idempotency_key_missing")
        if len(key) > MAX_KEY:
            return problem(
                400, f"The Idempotency-Key header is limited to {MAX_KEY} characters.", code="idempotency_key_too_long"
            )
        if "\x00" in key:
            return problem(
                400, "The Idempotency-Key header cannot contain NUL characters.", code="idempotency_key_invalid"
            )
        knob = faults.current()
        fault = ""
        if knob is not None and faults.roll(knob.unavailable_rate):
            fault = "unavailable"
        # Written before the body is read, in its own commit: H counts every keyed request that reached us.
        received = ChargeRequest.objects.create(idempotency_key=key, fault=fault)
        faults.delay(knob)
        if fault:
            raise ServiceUnavailable("Injected fault: the charge service is unavailable.")
        body = ChargeRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = services.create_charge(idempotency_key=key, **body.validated_data)
        except services.KeyReused as exc:
            raise Conflict(str(exc)) from None
        # The ambiguous case: the charge is committed, the caller hears nothing.
        dropped = knob is not None and faults.roll(knob.no_answer_rate) and faults.drop_connection(request._request)
        if dropped:
            ChargeRequest.objects.filter(pk=received.pk).update(fault="no_answer")
        data = ChargeSerializer(result.charge).data
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(data, status=code, headers={"Location": f"/v1/charges/{result.charge.id}"})


class ChargeDetailView(BaseAPIView):
    permission_classes = [*BaseAPIView.permission_classes, requires("charges.view_charge")]

    def get(self, request: Request, charge_id: str) -> Response:
        try:
            charge = Charge.objects.get(pk=uuid.UUID(charge_id))
        except (ValueError, Charge.DoesNotExist):
            return problem(404, f"No charge {charge_id}.", code="not_found")
        return Response(ChargeSerializer(charge).data)
