"""The /v1/workflows routes: read the body, call one service, respond."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import DatabaseError
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from .. import rules, workflows
from ..errors import InvalidJob, KeyConflict, TooManyUnfinished, WrongStatus
from ..models import Job, Workflow, WorkflowEdge
from ..services import dedupe_scope
from . import documents, problems
from .base import BaseAPIView
from .permissions import holds
from .submission import Invalid
from .throttles import SubmitThrottle
from .views import charge
from .workflow_submission import Closed, TooManyMembers, parse_workflow


def _visible(workflow_id: str, request: Request) -> Workflow:
    """The workflow if this user may see it: their own, or any with reliableq.view_job; else 404."""
    try:
        found: Workflow = Workflow.objects.get(pk=uuid.UUID(workflow_id))
    except (ValueError, Workflow.DoesNotExist):
        raise exceptions.NotFound(f"No workflow {workflow_id}.") from None
    if found.dedupe_scope != dedupe_scope(request.user) and not holds(request.user, "reliableq.view_job"):
        raise exceptions.NotFound(f"No workflow {workflow_id}.")
    return found


def _document(record: Workflow) -> dict[str, Any]:
    jobs = list(Job.objects.filter(workflow=record).order_by("id"))
    names = {j.id: j.member_name for j in jobs if j.member_name is not None}
    after: dict[Any, list[str]] = {}
    for upstream, target in WorkflowEdge.objects.filter(workflow=record.pk).values_list("upstream", "target"):
        if target in names and upstream in names:
            after.setdefault(target, []).append(str(names[upstream]))
    members = [j for j in jobs if j.member_name is not None]
    callbacks = sorted((j for j in jobs if j.member_name is None), key=lambda j: j.created_at)
    return documents.workflow(record, members, callbacks, after)


class WorkflowListView(BaseAPIView):
    """POST /v1/workflows: every member and callback checked, then all stored in one transaction."""

    needs = {"*": "submit_job"}

    def get_throttles(self) -> list[Any]:
        return [SubmitThrottle()]

    def post(self, request: Request) -> Response:
        key = request.META.get("HTTP_IDEMPOTENCY_KEY") or None
        data = request.data
        members = data.get("members") if isinstance(data, dict) else None
        if isinstance(members, list) and len(members) > workflows.MAX_MEMBERS:
            raise problems.PayloadTooLarge(
                f"At most {workflows.MAX_MEMBERS} members per workflow; this one has {len(members)}."
            )
        # Counted before the members are checked: invalid workflows cost what valid ones do.
        charge(self, request, max(1, len(members)) if isinstance(members, list) else 1)
        try:
            if key is not None:
                rules.key(key, field="Idempotency-Key")
            builder = parse_workflow(data)
            record, created = workflows.store(builder, submitted_by=request.user, dedupe_key=key)
        except TooManyMembers as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        except rules.PayloadTooLarge as exc:
            raise problems.PayloadTooLarge(str(exc)) from None
        except Invalid as exc:
            raise exceptions.ValidationError(exc.errors) from None
        except Closed as exc:
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
            _document(record),
            status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK,
            headers={"Location": f"/v1/workflows/{record.id}"},
        )


class WorkflowDetailView(BaseAPIView):
    """GET /v1/workflows/<id>: its submitter's, or anyone's with reliableq.view_job."""

    def get(self, request: Request, workflow_id: str) -> Response:
        return Response(_document(_visible(workflow_id, request)))


class WorkflowCancelView(BaseAPIView):
    needs = {"*": "cancel_job"}

    def post(self, request: Request, workflow_id: str) -> Response:
        record = _visible(workflow_id, request)
        try:
            record = workflows.cancel_workflow(record.pk, by=request.user)
        except WrongStatus as exc:
            raise problems.Conflict(str(exc)) from None
        return Response(_document(record))
