"""The bundled `charge` job kind: ask the charge service for one charge, under the job's effect key.

The request carries the service token (`Authorization: Token <CHARGES["SERVICE_TOKEN"]>`), so it
goes to `CHARGES["SERVICE_URL"]` and nowhere else: a redirect is never followed, whatever its
code, and is a permanent failure naming where it pointed. Only a 200/201 JSON answer that names
this job's idempotency key means the charge exists; any other 2xx is a permanent failure too,
since an address that answers like that is not the charge service (fix the setting, then replay).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any

import reliableq
from reliableq.queue import ClaimedJob

from .conf import charges_settings

TRANSIENT_STATUS = {408, 429}
SUCCESS_STATUS = (200, 201)
REQUEST_TIMEOUT = 10.0
MAX_ANSWER_BYTES = 1 << 20  # a charge is a few hundred bytes; never buffer an unbounded answer
FIX = "Check CHARGES['SERVICE_URL'] (it must be the charge service's own address), then replay the job."


@dataclass(frozen=True, slots=True)
class Answer:
    """What the charge service answered."""

    status: int
    body: str
    location: str | None = None  # for a 3xx: where it pointed, resolved against the request's URL


class RedirectRefused(urllib.error.HTTPError):
    """A 3xx that RefuseRedirects did not follow; `location` is the absolute target."""

    def __init__(
        self, req: urllib.request.Request, code: int, msg: str, headers: Message, fp: Any, *, location: str
    ) -> None:
        super().__init__(req.full_url, code, msg, headers, fp)
        self.location = location


class RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: the request carries the service token, which only SERVICE_URL may see."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Message, newurl: str
    ) -> urllib.request.Request | None:
        raise RedirectRefused(req, code, msg, headers, fp, location=newurl)


def opener() -> urllib.request.OpenerDirector:
    """http and https only (no file:, ftp: or data: handlers), with redirects refused."""
    director = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),  # the environment's proxies, as urllib.request.urlopen honours them
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        RefuseRedirects(),
    ):
        director.add_handler(handler)
    return director


def endpoint(base_url: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise reliableq.PermanentError(
            f"CHARGES['SERVICE_URL'] must be an http:// or https:// URL with a host, not {base_url!r}."
        )
    return base_url.rstrip("/") + "/v1/charges"


def classify(answer: Answer, idempotency_key: str) -> None:
    """Raise what an answer means for the job; return only when it is this job's charge."""
    status = answer.status
    if 300 <= status < 400:
        where = f"pointing to {answer.location}" if answer.location else "with no Location"
        raise reliableq.PermanentError(
            f"redirect refused: the charge service answered {status} {where}. The charge request carries "
            f"the service token and goes to CHARGES['SERVICE_URL'] only; no charge was requested. {FIX}"
        )
    if status in SUCCESS_STATUS:
        try:
            data = json.loads(answer.body)
        except ValueError:
            raise reliableq.PermanentError(
                f"charge service answered {status} with a body that is not JSON ({_snippet(answer.body)}): "
                f"that is not a charge, so no charge is known to exist. {FIX}"
            ) from None
        got = data.get("idempotency_key") if isinstance(data, dict) else None
        if got != idempotency_key:
            what = f"idempotency_key {got!r}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
            raise reliableq.PermanentError(
                f"charge service answered {status} without this job's idempotency key {idempotency_key!r} "
                f"(it carried {what}): that is not this job's charge. {FIX}"
            )
        return
    if 200 <= status < 300:
        raise reliableq.PermanentError(
            f"charge service answered {status}, not 200 or 201 with the charge ({_snippet(answer.body)}). {FIX}"
        )
    detail = _detail(answer.body)
    if status == 409:
        raise reliableq.PermanentError(
            f"charge service answered 409: the idempotency key was reused with another request ({detail})"
        )
    if status in TRANSIENT_STATUS or status >= 500:
        raise reliableq.TransientError(f"charge service answered {status}: {detail}")
    raise reliableq.PermanentError(f"charge service rejected the charge with {status}: {detail}")


def _snippet(body: str) -> str:
    return repr(body[:120]) if body else "an empty body"


def _detail(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:300]
    if isinstance(data, dict):
        return str(data.get("detail") or data)[:300]
    return str(data)[:300]


def post_charge(job: ClaimedJob, *, base_url: str, token: str, timeout: float) -> Answer:
    body = json.dumps({k: job.payload[k] for k in ("amount", "currency", "description") if k in job.payload}).encode()
    headers = {"Content-Type": "application/json", "Idempotency-Key": job.idempotency_key}
    if token:
        headers["Authorization"] = f"Token {token}"
    request = urllib.request.Request(endpoint(base_url), data=body, method="POST", headers=headers)
    try:
        with opener().open(request, timeout=timeout) as response:
            return Answer(response.status, _read(response))
    except urllib.error.HTTPError as exc:
        try:
            text = _read(exc)
        finally:
            exc.close()
        location = None
        if 300 <= exc.code < 400:
            location = getattr(exc, "location", None) or _location(request.full_url, exc.headers)
        return Answer(exc.code, text, location)
    except (TimeoutError, urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        # Maybe it committed, maybe not: retry with the same key and let the service decide.
        reason = getattr(exc, "reason", exc)
        raise reliableq.TransientError(f"no answer from the charge service: {reason}") from None


def _read(response: Any) -> str:
    return str(response.read(MAX_ANSWER_BYTES).decode(errors="replace"))


def _location(url: str, headers: Message | None) -> str | None:
    target = (headers.get("Location") or headers.get("URI")) if headers is not None else None
    return urllib.parse.urljoin(url, target) if target else None


@reliableq.handler("charge", max_attempts=8, timeout=30, http=True)
def charge(job: ClaimedJob) -> None:
    """POST /v1/charges with Idempotency-Key: reliableq:charge:<job id>, on every attempt.

    http=True: POST /v1/jobs may submit charges (the demo does), for users with reliableq.submit_job.
    """
    answer = post_charge(
        job,
        base_url=charges_settings.SERVICE_URL,
        token=charges_settings.SERVICE_TOKEN,
        timeout=REQUEST_TIMEOUT,
    )
    classify(answer, job.idempotency_key)
