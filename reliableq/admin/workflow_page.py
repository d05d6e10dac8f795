"""What a workflow's admin page reads: its members laid out as a graph, counts by status, callbacks.

A fixed number of queries whatever the size: the members (at most 10,000 short rows), their
edges, a GROUP BY, the callbacks. Only the first MAX_DRAWN members by depth become SVG nodes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html

from ..models import Job, JobStatus, Workflow, WorkflowEdge, callback_of
from . import graph
from .common import STATUS_COLOURS, status_badge

MAX_DRAWN = 200  # nodes in the SVG (and rows in the members' table); the job list has the rest
# Past this many edges the members are not laid out (the depths need every edge): a dense graph of
# 10,000 members could have millions, read on every view of the page.
MAX_EDGES = 50_000
MAX_CALLBACKS = 30  # the newest callback jobs shown (two or three per run)
LABEL_CHARS = 20  # what fits in a node's box at 12 px; its <title> has the whole name


@dataclass(frozen=True, slots=True)
class Node:
    id: uuid.UUID
    name: str
    kind: str
    status: str
    depth: int
    x: int
    y: int

    @property
    def url(self) -> str:
        return reverse("admin:reliableq_job_change", args=[self.id])

    @property
    def colour(self) -> str:
        return STATUS_COLOURS.get(self.status, "#000")

    @property
    def badge(self) -> str:
        return status_badge(self.status)

    @property
    def label(self) -> str:
        return self.name if len(self.name) <= LABEL_CHARS else self.name[: LABEL_CHARS - 1] + "…"

    @property
    def short_id(self) -> str:
        return str(self.id)[-8:]

    @property
    def text_x(self) -> int:
        return self.x + 8

    @property
    def text_y(self) -> int:
        return self.y + graph.NODE_HEIGHT // 2


@dataclass(frozen=True, slots=True)
class MembersPage:
    nodes: list[Node]
    lines: list[graph.Line]
    width: int
    height: int
    total: int  # members whose job rows exist
    left_out: int  # members not drawn (past MAX_DRAWN)
    lines_left_out: int
    laid_out: bool  # False: too many edges to compute depths; nodes in name order, no graph

    @property
    def node_width(self) -> int:
        return graph.NODE_WIDTH

    @property
    def node_height(self) -> int:
        return graph.NODE_HEIGHT


def members_page(workflow_id: uuid.UUID) -> MembersPage:
    """The first MAX_DRAWN members by depth, placed left to right, and the edges between them."""
    members = {
        pk: (name, kind, status)
        for pk, name, kind, status in Job.objects.filter(workflow_id=workflow_id, member_name__isnull=False)
        .order_by()
        .values_list("id", "member_name", "kind", "status")
    }
    edges = list(
        WorkflowEdge.objects.filter(workflow=workflow_id)
        .exclude(target=workflow_id)  # every member's edge to the workflow itself: not a dependency
        .order_by()
        .values_list("upstream", "target")[: MAX_EDGES + 1]
    )
    laid_out = len(edges) <= MAX_EDGES
    if not laid_out:
        edges = []
    depth = graph.depths(members, edges)
    drawing = graph.draw(depth, edges, order=lambda pk: graph.natural(members[pk][0]), limit=MAX_DRAWN)
    nodes = [Node(box.key, *members[box.key], depth=box.depth, x=box.x, y=box.y) for box in drawing.boxes]
    return MembersPage(
        nodes=nodes,
        lines=drawing.lines,
        width=drawing.width,
        height=drawing.height,
        total=len(members),
        left_out=drawing.left_out,
        lines_left_out=drawing.lines_left_out,
        laid_out=laid_out,
    )


def member_counts(workflow_id: uuid.UUID) -> list[tuple[str, int]]:
    """(status, members in it) in the statuses' order, the empty ones left out."""
    found = dict(
        Job.objects.filter(workflow_id=workflow_id, member_name__isnull=False)
        .order_by()
        .values("status")
        .annotate(n=Count("*"))
        .values_list("status", "n")
    )
    return [(status, found[status]) for status in JobStatus.values if found.get(status)]


@dataclass(frozen=True, slots=True)
class Callback:
    id: uuid.UUID
    kind: str
    status: str
    run: str
    event: str

    @property
    def url(self) -> str:
        return reverse("admin:reliableq_job_change", args=[self.id])


def callback_jobs(workflow_id: uuid.UUID) -> list[Callback]:
    """The newest MAX_CALLBACKS callback jobs fired, oldest first (models.callback_of reads run and event)."""
    rows = (
        Job.objects.filter(workflow_id=workflow_id, member_name__isnull=True)
        .order_by("-created_at")
        .values_list("id", "kind", "status", "dedupe_key")[:MAX_CALLBACKS]
    )
    made = []
    for pk, kind, status, key in rows:
        run, event = callback_of(key)
        made.append(Callback(pk, kind, status, run, event))
    return made[::-1]


def workflow_link(job: Job) -> str:
    """What a job's page says of its workflow: "Member <name> of workflow <name>", or which callback it is."""
    if job.workflow_id is None:
        return "-"
    name = Workflow.objects.filter(pk=job.workflow_id).values_list("name", flat=True).first()
    url = reverse("admin:reliableq_workflow_change", args=[job.workflow_id])
    link = format_html('<a href="{}" id="job-workflow">{}</a>', url, name or str(job.workflow_id)[-8:])
    if job.member_name is not None:
        return format_html("Member <strong>{}</strong> of workflow {}", job.member_name, link)
    run, event = job.callback
    return format_html("Callback <strong>{}</strong> (run {}) of workflow {}", event or "?", run or "?", link)
