"""A pick beside parked jobs: 100,000 PENDING rows due later (sleeping jobs, retries in backoff, jobs
enqueued for tomorrow) and a handful due now.

The due index is ordered (queue, priority, run_at, id), so the rows due later sit in it right after
the due ones of their priority: a pick that read the queue in one ordered scan stepped over all of
them on every claim that found fewer due rows than it asked for (785 buffers and 5.7 ms on
PostgreSQL 15, a sequential scan and a sort of 100 ms on 18). The pick walks a priority at a time,
each one an index range that ends at `run_at <= now`; it must read a few dozen buffers whatever
the statistics say, in each of the pick's forms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from reliableq.floors import NO_ID, NO_PRIORITY, NO_TIME
from reliableq.queue import pick

from . import tables
from .explain import explain

PARKED = tables.Mix(due=40, scheduled=100_000, running=50, succeeded=2_000)
BUFFERS = 120  # the walk reads a few index pages per priority (two here) and the rows it locks


def analyzed(mix: tables.Mix) -> None:
    """Statistics that are right: the parked rows were there when the table was analyzed."""
    tables.truncate()
    tables.load(mix)
    tables.analyze()


STATES: dict[str, Callable[[tables.Mix], None]] = {
    "analyzed": analyzed,
    "never analyzed": tables.never_analyzed,
    "analyzed empty": tables.analyzed_empty,
    "analyzed mid-load": tables.analyzed_mid_load,
}

SWEEP = (NO_PRIORITY, NO_TIME, NO_ID, NO_TIME)


def picks() -> dict[str, tuple[str, tuple[Any, ...]]]:
    """Each form of the pick a claim sends, its floors (if any) at the start of the queue."""
    forms = {
        "plain": pick.picked_sql(tables.QUEUES, 10, (), None),
        "floored": pick.picked_sql(tables.QUEUES, 10, (), None, floored=True),
        "floor's priority": pick.picked_sql(tables.QUEUES[:1], 10, (), None, floored=True, walk=False),
        "other kinds": pick.picked_sql(tables.QUEUES, 10, (tables.CAPPED,), None, floored=True),
        "one kind": pick.picked_sql(tables.QUEUES, 10, (), tables.CAPPED),
        "per key": pick.picked_sql(tables.QUEUES, 30, (), tables.CAPPED, 1),
    }
    return {
        name: (sql, tuple(SWEEP[p.part] if isinstance(p, pick.Floor) else p for p in params))
        for name, (sql, params) in forms.items()
    }


@pytest.mark.parametrize("state", list(STATES))
def test_a_pick_beside_100000_parked_jobs_reads_a_few_dozen_buffers(state: str, plan_tables: None) -> None:
    STATES[state](PARKED)
    read = {}
    for name, (sql, params) in picks().items():
        plan = explain(sql, params)  # rolled back, its row locks with it
        read[name] = (plan.buffers, plan.root["Actual Rows"])
    assert all(buffers <= BUFFERS for buffers, _ in read.values()), str(read)
    assert read["plain"][1] == 10 and read["floored"][1] == 10, read  # the due rows are still found
