"""Errors as data, answered as application/problem+json (RFC 9457)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError, InterfaceError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .. import outage

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "https://reliableq.dev/problems/"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The payload is larger than MAX_PAYLOAD_BYTES."
    default_code = "payload_too_large"


class LargerThanRate(exceptions.APIException):
    """A request that costs more than a whole window of the submit rate: waiting never admits it (no Retry-After)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request costs more than the submission rate admits in a whole window."
    default_code = "larger_than_rate"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The service is unavailable; try again later."
    default_code = "unavailable"
    wait = 2  # DRF's handler sends it as Retry-After


class DatabaseUnavailable(ServiceUnavailable):
    """The database is away (restarting, failing over, read-only): 503, never a 500."""

    default_detail = (
        "The database is unavailable (restarting or failing over); try again in a few seconds. A write whose "
        "answer was lost may have been stored: send it again with the same Idempotency-Key."
    )
    default_code = "database_unavailable"


class TooManyUnfinished(exceptions.APIException):
    """The submitter holds MAX_PENDING_PER_SUBMITTER unfinished jobs: 429, come back once some finish."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_detail = "You hold too many unfinished jobs (MAX_PENDING_PER_SUBMITTER)."
    default_code = "too_many_unfinished"
    wait = 60  # DRF's handler sends it as Retry-After


TITLES = {
    400: "Bad request",
    401: "Authentication required",
    403: "Permission denied",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    429: "Too many requests",
    503: "Service unavailable",
}


def problem(status_code: int, detail: str, *, code: str | None = None, **extra: Any) -> Response:
    code = code or TITLES.get(status_code, "error").lower().replace(" ", "_")
    body = {
        "type": TYPE_BASE + code,
        "title": TITLES.get(status_code, "Error"),
        "status": status_code,
        "detail": detail,
        **extra,
    }
    return Response(body, status=status_code, content_type=PROBLEM_JSON)


def _encodable(value: Any) -> Any:
    """The error detail with every string made UTF-8-encodable.

    Details can echo the request (an unknown field's name, say); a lone surrogate in it would
    make the JSON renderer fail with a 500 instead of answering the 400.
    """
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    return value


def _flatten(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return " ".join(_flatten(v) for v in detail)
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, reshaped: every error body is a problem document."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, RequestDataTooBig):
        # Django refuses to read a body over DATA_UPLOAD_MAX_MEMORY_SIZE; left alone, that is
        # its own text/html 400 rather than a problem document.
        exc = PayloadTooLarge("The request body is larger than this server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE).")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DatabaseError | InterfaceError) and outage.unavailable(exc):
        exc = DatabaseUnavailable()  # anywhere in a request: the token lookup, a permission, the view
    if isinstance(exc, ServiceUnavailable):
        # Whatever failed on this thread's connections is closed, so the next request connects again
        # (to the new primary): a read-only server would otherwise keep answering Django's health check.
        outage.drop_failed_connections()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = _encodable(exc.detail if isinstance(exc, exceptions.APIException) else response.data)
    code = exc.get_codes() if isinstance(exc, exceptions.APIException) else None
    extra: dict[str, Any] = {}
    if isinstance(exc, exceptions.ValidationError):
        extra["errors"] = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        message = "The request is invalid: " + _flatten(detail)
        code = "invalid"
    else:
        message = _flatten(detail)
        code = code if isinstance(code, str) else None
    out = problem(response.status_code, message, code=code, **extra)
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in response:
            out[header] = response[header]
    return out
