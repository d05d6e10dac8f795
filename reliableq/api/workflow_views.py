"""The /v1/workflows routes: read the body, call one service, respond."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from django.db import DatabaseError
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from .. import rules, workflows
from ..errors import InvalidJob, KeyConflict, TooManyUnfinished, WrongStatus
from ..models import Workflow
from ..services import dedupe_scope
from . import documents, problems, workflow_pages, workflow_submission
from .base import BaseAPIView
from .permissions import holds
from .submission import Invalid
from .throttles import ReadThrottle, SubmitThrottle
from .views import charge
from .workflow_pages import PAGE


def _visible(workflow_id: str, request: Request) -> Workflow:
    """The workflow if this user may see it: their own, or any with reliableq.view_job; else 404."""
    try:
        found: Workflow = Workflow.objects.get(pk=uuid.UUID(workflow_id))
    except (ValueError, Workflow.DoesNotExist):
        raise exceptions.NotFound(f"No workflow {workflow_id}.") from None
    if found.dedupe_scope != dedupe_scope(request.user) and not holds(request.user, "reliableq.view_job"):
        raise exceptions.NotFound(f"No workflow {workflow_id}.")
    return found


def _document(
    record: Workflow, request: Request, *, cursor: uuid.UUID | None = None, size: int = PAGE
) -> dict[str, Any]:
    """The workflow with a page of its members; `next` carries the cursor of the page after it."""
    found = workflow_pages.page(record.pk, cursor=cursor, size=size)
    next_page = None
    if found.last is not None:
        query = urlencode({"cursor": str(found.last), "page_size": size})
        next_page = request.build_absolute_uri(f"/v1/workflows/{record.pk}?{query}")
    return documents.workflow(
        record, found.members, workflow_pages.callbacks(record.pk), found.after, next_page=next_page
    )


class WorkflowListView(BaseAPIView):
    """POST /v1/workflows: every member and callback checked, then all stored in one transaction."""

    needs = {"*": "submit_job"}

    def get_throttles(self) -> list[Any]:
        return [SubmitThrottle()]

    def post(self, request: Request) -> Response:
        key = request.META.get("HTTP_IDEMPOTENCY_KEY") or None
        data = request.data
        try:
            # Counted before the members are checked (invalid workflows cost what valid ones do),
            # after the bounds that make a body too large to look at.
            cost = workflow_submission.cost(data)
        except workflow_submission.TooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        charge(self, request, cost)
        try:
            if key is not None:
                rules.key(key, field="Idempotency-Key")
            builder = workflow_submission.parse_workflow(data)
            record, created = workflows.store(builder, submitted_by=request.user, dedupe_key=key)
        except workflow_submission.TooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        except rules.PayloadTooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        except Invalid as exc:
            raise exceptions.ValidationError(exc.errors) from None
        except workflow_submission.Closed as exc:
            raise exceptions.PermissionDenied(
                {k: v for k, v in exc.errors.items()} | {"detail": "These kinds are not open to HTTP."}
            ) from None
        except workflows.InvalidWorkflow as exc:
            where = [f"members[{i}]" for i in exc.indexes] or [exc.field]
            raise exceptions.ValidationError({w: [str(exc)] for w in where}) from None
        except KeyConflict as exc:
            raise problems.Conflict(str(exc)) from None
        except TooManyUnfinished as exc:
            raise problems.TooManyUnfinished(str(exc)) from None
        except InvalidJob as exc:
            raise exceptions.ValidationError({exc.field: [str(exc)]}) from None
        except DatabaseError:
            raise problems.ServiceUnavailable(
                "The workflow could not be stored; nothing was made. Try again."
            ) from None
        return Response(
            _document(record, request),
            status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK,
            headers={"Location": f"/v1/workflows/{record.id}"},
        )


class WorkflowDetailView(BaseAPIView):
    """GET /v1/workflows/<id>: its submitter's, or anyone's with reliableq.view_job; a page of members."""

    query_parameters = frozenset({"cursor", "page_size"})

    throttle_classes = [ReadThrottle]

    def get(self, request: Request, workflow_id: str) -> Response:
        record = _visible(workflow_id, request)
        size_text = request.query_params.get("page_size", str(PAGE))
        if not size_text.isdecimal() or not 1 <= int(size_text) <= PAGE:
            raise exceptions.ValidationError({"page_size": [f"page_size must be an integer from 1 to {PAGE}."]})
        cursor = request.query_params.get("cursor")
        try:
            after = None if cursor is None else uuid.UUID(cursor)
        except ValueError:
            raise exceptions.ValidationError(
                {"cursor": ["Invalid cursor: pass back a `next` link unchanged."]}
            ) from None
        return Response(_document(record, request, cursor=after, size=int(size_text)))


class WorkflowCancelView(BaseAPIView):
    needs = {"*": "cancel_job"}

    def post(self, request: Request, workflow_id: str) -> Response:
        record = _visible(workflow_id, request)
        try:
            record = workflows.cancel_workflow(record.pk, by=request.user)
        except WrongStatus as exc:
            raise problems.Conflict(str(exc)) from None
        return Response(_document(record, request))
