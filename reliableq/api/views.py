"""The /v1/jobs routes: validate, call one service, respond."""

from __future__ import annotations

import base64
import dataclasses
import uuid
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode

from django.db import DatabaseError
from django.db.models import prefetch_related_objects
from django.http import HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import exceptions, status
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from .. import rules, services, tracing
from ..errors import InvalidJob, KeyConflict, TooManyUnfinished, WrongStatus
from ..models import BatchKey, Job, JobStatus, Step
from ..queue import health, stats
from . import documents, problems
from .base import BaseAPIView
from .permissions import holds
from .serializers import FilterSerializer
from .submission import Invalid, Submission, batch_items, fingerprint, parse, parse_items, same
from .throttles import ReadThrottle, SubmitThrottle


def _job_or_404(job_id: str) -> Job:
    try:
        return cast(
            Job, Job.objects.select_related("return_value").prefetch_related("attempt_set").get(pk=uuid.UUID(job_id))
        )
    except (ValueError, Job.DoesNotExist):
        raise exceptions.NotFound(f"No job {job_id}.") from None


def _submission(data: Any) -> Submission:
    """The body as a Submission, or the 400 (or 413) that says what is wrong with it."""
    try:
        return parse(data)
    except rules.PayloadTooLarge as exc:
        raise problems.PayloadTooLarge(str(exc)) from None
    except Invalid as exc:
        raise exceptions.ValidationError(exc.errors) from None


def _reads_tracebacks(request: Request) -> bool:
    """Operators (reliableq.view_job) read stored tracebacks; anyone else reads errors without them."""
    return holds(request.user, "reliableq.view_job")


# A job's page lists at most this many of its steps, the first recorded; `step_count` says how many there are.
MAX_STEPS = 1000


def _document(job: Job, request: Request) -> dict[str, Any]:
    """A job on its own: its attempts, and what it recorded (steps and their count)."""
    operator = _reads_tracebacks(request)
    document = documents.job(job, job.attempt_set.all(), tracebacks=operator)
    recorded = Step.objects.filter(job_id=job.pk).order_by("id")[:MAX_STEPS]
    document["steps"] = documents.steps(recorded, values=operator)
    count = len(document["steps"])
    document["step_count"] = count if count < MAX_STEPS else Step.objects.filter(job_id=job.pk).count()
    return document


_JSON = JSONRenderer()


def _answer(request: Request, document: Any, *, status: int, headers: dict[str, str]) -> HttpResponse:
    """The document as JSON, rendered here when the client asked for plain JSON: the same bytes
    DRF's Response would render later, without its template-response machinery (3% of a
    submission's instructions, `python -m bench.httpcost`). Other media types (an indent
    parameter, say) go through DRF's Response as before."""
    if request.accepted_media_type != _JSON.media_type:
        return Response(document, status=status, headers=headers)
    return HttpResponse(_JSON.render(document), status=status, headers=headers, content_type=_JSON.media_type)


class JobPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def decode_cursor(self, request: Request) -> Any:
        """DRF's cursor, checked: a bad one is a 400 (a bad filter), never a 404, a 500 or the first page.

        DRF answers an undecodable cursor with 404, reads text that is not base64 (`'`) as an
        empty cursor (the first page), and passes a decodable one's position straight into a
        created_at filter, where a position that is not a timestamp raises Django's
        ValidationError (a 500).
        """
        invalid = exceptions.ValidationError(
            {"cursor": ["Invalid cursor: pass back a `next` or `previous` link unchanged."]}
        )
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is not None and not _cursor_tokens(encoded):
            raise invalid
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            raise invalid from None
        if cursor is not None and cursor.position is not None:
            try:
                position = parse_datetime(str(cursor.position))
            except ValueError:
                position = None
            if position is None or timezone.is_naive(position):
                raise invalid
        return cursor


def _cursor_tokens(encoded: str) -> bool:
    """Whether `encoded` is strict base64 of a query string of DRF's cursor fields, each once (every
    cursor DRF writes has one at least: a `next` has a position or an offset, a `previous` r=1)."""
    try:
        text = base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except ValueError:  # binascii.Error and UnicodeError are ValueErrors
        return False
    names = [name for name, _ in pairs]
    return bool(names) and len(set(names)) == len(names) and set(names) <= {"o", "r", "p"}


class JobListView(BaseAPIView):
    needs = {"GET": "view_job", "POST": "submit_job"}

    def known_query_parameters(self) -> frozenset[str] | None:
        # The list's FilterSerializer refuses what it does not know; a submission takes none.
        return None if self.request.method == "GET" else frozenset()

    def get_throttles(self) -> list[Any]:
        return [SubmitThrottle()] if self.request.method == "POST" else []

    def get(self, request: Request) -> Response:
        filters = FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        jobs = Job.objects.select_related("return_value").prefetch_related("attempt_set")
        for name in ("status", "kind", "queue"):
            if name in filters.validated_data:
                jobs = jobs.filter(**{name: filters.validated_data[name]})
        paginator = JobPagination()
        page: list[Job] | None = paginator.paginate_queryset(jobs, request, view=self)
        tracebacks = _reads_tracebacks(request)
        return paginator.get_paginated_response(
            [documents.job(j, j.attempt_set.all(), tracebacks=tracebacks) for j in page or []]
        )

    def post(self, request: Request) -> HttpResponse:
        charge(self, request, 1)
        sub = _submission(request.data)
        key = request.META.get("HTTP_IDEMPOTENCY_KEY") or None  # (request.headers copies every header first)
        if key is not None and sub.options.unique_key is not None:
            # A job returned through its unique_key could not bind the key to this body: refused.
            raise exceptions.ValidationError(
                {"unique_key": ["A unique_key cannot be combined with an Idempotency-Key; send one or the other."]}
            )
        try:
            if key is not None:
                rules.key(key, field="Idempotency-Key")
            # 202 only after this commits: an acknowledged job is a durable job. The INSERT is one
            # statement in autocommit, so it commits as it returns (no BEGIN and COMMIT round trips).
            with tracing.incoming(request.META):
                job, created = _submit(request, sub, key)
        except rules.PayloadTooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        except TooManyUnfinished as exc:
            raise problems.TooManyUnfinished(str(exc)) from None
        except InvalidJob as exc:
            raise exceptions.ValidationError({exc.field: [str(exc)]}) from None
        except DatabaseError:
            raise problems.ServiceUnavailable("The job could not be stored; nothing was accepted. Try again.") from None
        # Not created: the Idempotency-Key found its job (it must be this body's), or else the
        # unique_key found the caller's active job of the kind, which is the answer whatever its body.
        if not created and key is not None and job.dedupe_key == key:
            # Keys are scoped per submitter, so the job named here is always the caller's own.
            if not same(job, sub):
                raise problems.Conflict(f"Idempotency-Key {key!r} was already used for job {job.id} with another body.")
            if BatchKey.objects.filter(job=job).exists():
                raise problems.Conflict(f"Idempotency-Key {key!r} was already used for a batch.")
        # A job just inserted has no attempts: answer from the INSERT's RETURNING row.
        attempts = [] if created else list(job.attempt_set.all())
        code = status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
        return _answer(
            request,
            documents.job(job, attempts, tracebacks=_reads_tracebacks(request)),
            status=code,
            headers={"Location": f"/v1/jobs/{job.id}"},
        )


class JobBatchView(BaseAPIView):
    """POST /v1/jobs/batch: up to 1,000 jobs in one INSERT, all or nothing; an Idempotency-Key covers the batch."""

    needs = {"*": "submit_job"}

    def get_throttles(self) -> list[Any]:
        return [SubmitThrottle()]

    def post(self, request: Request) -> Response:
        key = request.META.get("HTTP_IDEMPOTENCY_KEY") or None
        try:
            items = batch_items(request.data)
            # Counted before the items are checked: a flood of invalid batches costs the same as valid ones.
            charge(self, request, len(items))
            if key is not None:
                rules.key(key, field="Idempotency-Key")
            subs = parse_items(items)
            # One statement in autocommit: every job commits, or none does (with a key, one transaction).
            with tracing.incoming(request.META):
                jobs, created = services.submit_many(
                    subs, submitted_by=request.user, key=key, fingerprint=fingerprint(items) if key else ""
                )
        except rules.PayloadTooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        except Invalid as exc:
            raise exceptions.ValidationError(exc.errors) from None
        except TooManyUnfinished as exc:
            raise problems.TooManyUnfinished(str(exc)) from None
        except KeyConflict as exc:
            raise problems.Conflict(str(exc)) from None
        except InvalidJob as exc:
            raise exceptions.ValidationError({exc.field: [str(exc)]}) from None
        except DatabaseError:
            raise problems.ServiceUnavailable("The jobs could not be stored; none was accepted. Try again.") from None
        tracebacks = _reads_tracebacks(request)
        if created:
            documents_ = [documents.job(job, [], tracebacks=tracebacks) for job in jobs]
        else:
            prefetch_related_objects(jobs, "attempt_set", "return_value")
            documents_ = [documents.job(job, job.attempt_set.all(), tracebacks=tracebacks) for job in jobs]
        return Response({"jobs": documents_}, status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK)


def _submit(request: Request, sub: Submission, key: str | None) -> tuple[Job, bool]:
    return services.submit(
        sub.kind,
        sub.payload,
        dataclasses.replace(sub.options, dedupe_key=key),
        submitted_by=request.user,
        encoded=sub.encoded,  # parse() applied the rules: not twice
    )


def charge(view: BaseAPIView, request: Request, jobs: int) -> None:
    """Count `jobs` against the submitter's throttle: 429 with Retry-After when this window has no room
    left for them, 413 without it when they are more than a whole window admits (waiting never helps)."""
    for throttle in view.get_throttles():
        if isinstance(throttle, SubmitThrottle) and not throttle.charge(request, view, jobs):
            limit = getattr(throttle, "num_requests", None)
            if throttle.over_rate:
                raise problems.LargerThanRate(
                    f"This request counts {jobs:,} jobs against the submission rate, more than a whole window "
                    f"admits ({throttle.rate}, scope {throttle.scope}): raise that rate "
                    f'(REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["{throttle.scope}"]) or split the request.'
                )
            detail = f"Submission rate exceeded: {limit} jobs per window (a batch of N counts N)."
            raise exceptions.Throttled(wait=throttle.wait(), detail=detail)


class JobDetailView(BaseAPIView):
    needs = {"*": "view_job"}

    def get(self, request: Request, job_id: str) -> Response:
        return Response(_document(_job_or_404(job_id), request))


class _FateView(BaseAPIView):
    """replay and cancel: a permission, a service call, a 404 or a 409."""

    success: int = status.HTTP_200_OK

    def act(self, job_id: uuid.UUID, user: Any) -> Job:
        raise NotImplementedError

    def post(self, request: Request, job_id: str) -> Response:
        try:
            pk = uuid.UUID(job_id)
            self.act(pk, request.user)
        except (ValueError, Job.DoesNotExist):
            raise exceptions.NotFound(f"No job {job_id}.") from None
        except WrongStatus as exc:
            raise problems.Conflict(str(exc)) from None
        return Response(_document(_job_or_404(job_id), request), status=self.success)


class ReplayView(_FateView):
    needs = {"*": "replay_job"}
    success = status.HTTP_202_ACCEPTED

    def act(self, job_id: uuid.UUID, user: Any) -> Job:
        return services.replay(job_id, by=user)


class CancelView(_FateView):
    """200 with the job CANCELLED (it was PENDING); 202 with cancel_requested (it is RUNNING and
    ends CANCELLED once its handler stops)."""

    needs = {"*": "cancel_job"}

    def act(self, job_id: uuid.UUID, user: Any) -> Job:
        job = services.cancel(job_id, by=user)
        self.success = status.HTTP_202_ACCEPTED if job.status == JobStatus.RUNNING else status.HTTP_200_OK
        return job


def _body_fields(request: Request, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object body (an empty body is {}), with no field but `allowed`."""
    data = request.data
    if data is None or (hasattr(data, "keys") and not data and not isinstance(data, dict)):
        data = {}
    if not isinstance(data, dict):
        raise exceptions.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise exceptions.ValidationError({name: ["Unknown field."] for name in unknown})
    return data


def _queue_document(name: str, request: Request) -> dict[str, Any]:
    """The queue's state; its counts only for users who may read jobs (reliableq.view_job)."""
    (summary,) = stats.queue_summaries([name])
    document = documents.queue(summary)
    if not holds(request.user, "reliableq.view_job"):
        document = {field: document[field] for field in ("name", "paused", "paused_until", "paused_by")}
    return document


class QueueListView(BaseAPIView):
    """GET /v1/queues: queues with jobs or a pause state, by name, a page at a time."""

    query_parameters = frozenset({"after", "page_size"})

    throttle_classes = [ReadThrottle]

    needs = {"*": "view_job"}

    def get(self, request: Request) -> Response:
        after = request.query_params.get("after", "")
        if after and not rules.QUEUE.fullmatch(after):
            raise exceptions.ValidationError({"after": [f"after must be a queue name: {rules.QUEUE_HELP}."]})
        size_text = request.query_params.get("page_size", str(stats.QUEUE_PAGE))
        # isdecimal, not isdigit: "²".isdigit() is true, and int() refuses it (a 500).
        if not size_text.isdecimal() or not 1 <= int(size_text) <= stats.MAX_QUEUE_PAGE:
            raise exceptions.ValidationError(
                {"page_size": [f"page_size must be an integer from 1 to {stats.MAX_QUEUE_PAGE}."]}
            )
        page, last = stats.queue_page(after=after, limit=int(size_text))
        next_url = None
        if last is not None:
            next_url = request.build_absolute_uri(
                f"{request.path}?{urlencode({'after': last, 'page_size': size_text})}"
            )
        return Response({"queues": [documents.queue(q) for q in page], "next": next_url})


class _QueueStateView(BaseAPIView):
    """pause and resume: reliableq.pause_queue, a checked name and body, a service call (audited there)."""

    fields: tuple[str, ...] = ()

    needs = {"*": "pause_queue"}

    def act(self, name: str, body: dict[str, Any], user: Any) -> None:
        raise NotImplementedError

    def post(self, request: Request, name: str) -> Response:
        body = _body_fields(request, self.fields)
        try:
            self.act(name, body, request.user)
        except InvalidJob as exc:
            raise exceptions.ValidationError({exc.field: [str(exc)]}) from None
        return Response(_queue_document(name, request))


class QueuePauseView(_QueueStateView):
    fields = ("until",)

    def act(self, name: str, body: dict[str, Any], user: Any) -> None:
        rules.queue_name(name)  # a bad name first: it is the resource
        until = body.get("until")
        services.pause(name, until=None if until is None else rules.aware_time(until, field="until"), by=user)


class QueueResumeView(_QueueStateView):
    def act(self, name: str, body: dict[str, Any], user: Any) -> None:
        services.resume(name, by=user)


class StatsView(BaseAPIView):
    throttle_classes = [ReadThrottle]

    needs = {"*": "view_job"}

    def get(self, request: Request) -> Response:
        return Response(stats.snapshot())


class MetricsView(BaseAPIView):
    """Prometheus text format; scrape it with `authorization: {type: Token, credentials: <key>}`."""

    throttle_classes = [ReadThrottle]

    needs = {"*": "view_job"}

    def get(self, request: Request) -> HttpResponse:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from .. import metrics, readcache

        text = readcache.read("metrics", lambda: generate_latest(metrics.registry()))
        return HttpResponse(text, content_type=CONTENT_TYPE_LATEST)


class ReadyView(BaseAPIView):
    """For load balancers and Kubernetes: 200 when the database answers and is migrated, else 503.

    Open to anonymous callers, like the schema: it says nothing but ready or not.
    """

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        problems_found = health.problems()
        if problems_found:
            return problems.problem(503, "; ".join(problems_found), code="not_ready")
        return Response({"status": "ready"})
