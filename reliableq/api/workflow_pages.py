"""A workflow read a page at a time: its members in id order, each with the names it runs after.

A page holds at most PAGE members, and stops early (at a member's boundary, one member at least)
once its members' `after` lists reach PAGE_AFTER names: a workflow may hold 10,000 members and
100,000 entries, and one read of it all was seconds of work and megabytes of JSON. Each page
costs a few queries: the members after the cursor, their in-degrees (in chunks, until the page
is full), and the names each of the page's members runs after.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Count, OuterRef, Subquery

from ..models import Job, WorkflowEdge

PAGE = 1_000  # members a page, at most (and by default)
PAGE_AFTER = 10_000  # `after` names a page lists, at most, unless its one member has more


@dataclass(frozen=True, slots=True)
class Page:
    members: list[Job]
    after: dict[uuid.UUID, list[str]]  # each member's upstream names (absent: none)
    last: uuid.UUID | None  # the next page's cursor; None on the last page


def page(workflow_id: uuid.UUID, *, cursor: uuid.UUID | None = None, size: int = PAGE) -> Page:
    """The members after `cursor` (a member id; None: from the first), at most `size` of them."""
    members = Job.objects.filter(workflow_id=workflow_id, member_name__isnull=False)
    if cursor is not None:
        members = members.filter(id__gt=cursor)
    rows = list(members.order_by("id").only("id", "member_name", "kind", "status")[: size + 1])
    more = len(rows) > size
    rows, degrees, cut = _within_after(rows[:size])
    ids = [m.id for m in rows if degrees.get(m.id)]
    # Each member's upstream names, in their ids' order, aggregated in the database: one row per
    # member rather than a row (and two UUIDs to decode) per edge.
    name = Subquery(Job.objects.filter(pk=OuterRef("upstream")).values("member_name"))
    listed_names = (
        WorkflowEdge.objects.filter(target__in=ids)
        .order_by()
        .values("target")
        .annotate(names=ArrayAgg(name, order_by="upstream"))
    )
    # (A member pruned before its workflow has no name left to show.)
    after = {t: [n for n in names if n is not None] for t, names in listed_names.values_list("target", "names")}
    return Page(members=rows, after=after, last=rows[-1].id if (more or cut) and rows else None)


def _within_after(rows: list[Job]) -> tuple[list[Job], dict[uuid.UUID, int], bool]:
    """The first of `rows` whose in-degrees add up to PAGE_AFTER at most (one at least), their
    in-degrees, and whether any row was left out.

    The in-degrees are counted in chunks that double, from the first row on, until the page is
    full: a page of a dense graph counts about its own edges, not those of every row it might hold.
    By target alone: the targets are this workflow's members, and a filter on the workflow led the
    planner to read every edge of the workflow."""
    degrees: dict[uuid.UUID, int] = {}
    kept = listed = 0
    step = 64
    while kept < len(rows):
        chunk = rows[kept : kept + step]
        counted = WorkflowEdge.objects.filter(target__in=[m.id for m in chunk]).order_by().values("target")
        degrees.update(counted.annotate(n=Count("*")).values_list("target", "n"))
        for member in chunk:
            degree = degrees.get(member.id, 0)
            if kept and listed + degree > PAGE_AFTER:
                return rows[:kept], degrees, True
            kept, listed = kept + 1, listed + degree
        step *= 2
    return rows, degrees, False


def callbacks(workflow_id: uuid.UUID) -> list[Job]:
    """The callback jobs fired, oldest first."""
    return list(Job.objects.filter(workflow_id=workflow_id, member_name__isnull=True).order_by("created_at", "id"))
