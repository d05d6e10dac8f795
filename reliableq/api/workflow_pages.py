"""A workflow read a page at a time: its members in id order, each with the names it runs after.

A page holds at most PAGE members, and stops early (at a member's boundary, one member at least)
once its members' `after` lists reach PAGE_AFTER names: a workflow may hold 10,000 members and
100,000 entries, and one read of it all was seconds of work and megabytes of JSON. Each page
costs a fixed number of queries: the members after the cursor, their in-degrees, their edges and
the names those edges point to.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db.models import Count

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
    rows = rows[:size]
    edges = WorkflowEdge.objects.filter(workflow=workflow_id).order_by()
    degrees = dict(
        edges.filter(target__in=[m.id for m in rows]).values("target").annotate(n=Count("*")).values_list("target", "n")
    )
    kept = listed = 0
    for member in rows:
        degree = degrees.get(member.id, 0)
        if kept and listed + degree > PAGE_AFTER:
            break
        kept, listed = kept + 1, listed + degree
    more = more or kept < len(rows)
    rows = rows[:kept]
    ids = [m.id for m in rows if degrees.get(m.id)]
    # Names in the members' own order (by id), as the pages list them.
    pairs = list(edges.filter(target__in=ids).order_by("target", "upstream").values_list("target", "upstream"))
    names = dict(
        Job.objects.filter(pk__in=edges.filter(target__in=ids).values("upstream")).values_list("id", "member_name")
    )
    after: dict[uuid.UUID, list[str]] = {}
    for target, upstream in pairs:
        if upstream in names:  # (a member pruned before its workflow has no name left to show)
            after.setdefault(target, []).append(str(names[upstream]))
    return Page(members=rows, after=after, last=rows[-1].id if more and rows else None)


def callbacks(workflow_id: uuid.UUID) -> list[Job]:
    """The callback jobs fired, oldest first."""
    return list(Job.objects.filter(workflow_id=workflow_id, member_name__isnull=True).order_by("created_at", "id"))
