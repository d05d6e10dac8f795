"""The bundled `charge` job kind: ask the charge service for one charge, under the job's effect key."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any

import reliableq
from reliableq.conf import reliableq_settings
from reliableq.leases import ClaimedJob

TRANSIENT_STATUS = {408, 429}
REQUEST_TIMEOUT = 10.0


def classify(status: int, body: str) -> None:
    """Raise what an HTTP answer means for the job; return for success (200 or 201)."""
    if status in (200, 201):
        return
    detail = _detail(body)
    if status == 409:
        raise reliableq.PermanentError(
            f"charge service answered 409: the idempotency key was reused with another request ({detail})"
        )
    if status in TRANSIENT_STATUS or status >= 500:
        raise reliableq.TransientError(f"charge service answered {status}: {detail}")
    raise reliableq.PermanentError(f"charge service rejected the charge with {status}: {detail}")


def _detail(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:300]
    if isinstance(data, dict):
        return str(data.get("detail") or data)[:300]
    return str(data)[:300]


def post_charge(job: ClaimedJob, *, base_url: str, timeout: float) -> tuple[int, str]:
    body = json.dumps(
        {k: job.payload[k] for k in ("amount", "currency", "description") if k in job.payload}
    ).encode()
    request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/charges",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": job.idempotency_key,
            **_auth_header(),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, http.client.HTTPException, socket.timeout, OSError) as exc:
        # Maybe it committed, maybe not: retry with the same key and let the service decide.
        reason = getattr(exc, "reason", exc)
        raise reliableq.TransientError(f"no answer from the charge service: {reason}") from None


def _auth_header() -> dict[str, str]:
    token = reliableq_settings.CHARGE_SERVICE_TOKEN
    return {"Authorization": f"Token {token}"} if token else {}


@reliableq.handler("charge", max_attempts=8, timeout=30)
def charge(job: ClaimedJob) -> Any:
    """POST /v1/charges with Idempotency-Key: reliableq:charge:<job id>, on every attempt."""
    status, body = post_charge(job, base_url=reliableq_settings.CHARGE_SERVICE_URL, timeout=REQUEST_TIMEOUT)
    classify(status, body)
