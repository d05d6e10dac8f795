"""A paginator for big tables: counts at most CAP rows instead of the whole table."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from django.core.paginator import Paginator
from django.db.models import QuerySet

if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:
    _Paginator = Paginator  # generic in the stubs only

CAP = 10_000


class CappedCountPaginator(_Paginator):
    """`count` runs SELECT count(*) FROM (... LIMIT CAP+1): bounded work on any table size.

    Past the cap the admin shows CAP+1 results (and the pages up to there); the filters
    and search narrow it down. Exact totals by status are on the queue dashboard.
    """

    @cached_property
    def count(self) -> int:
        queryset = cast("QuerySet[Any]", self.object_list)  # the admin pages querysets
        return int(queryset.order_by()[: CAP + 1].count())

    @property
    def capped(self) -> bool:
        return self.count > CAP
