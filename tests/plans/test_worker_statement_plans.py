"""Every statement on a worker's path keeps a bounded cost under any statistics.

Each test puts the job tables in one statistics state (tables.py) with the same 50,000 rows
(a backlog of 32,000, a fleet's 1,000 RUNNING jobs, 300 of them with expired leases, 17,000
finished), runs every call of worker_path.STATEMENTS under EXPLAIN (ANALYZE, BUFFERS), and
holds each statement it sends to fixed bounds: shared buffers, rows its scans look at, no
sequential scan of the job or attempt table, no nested loop over a whole index.

The writes meet the bounds by their shape alone. Where a pick (a claim's, prune's) does not,
because the statistics make another index look as cheap as its own, the pick's guard must
notice and analyze, and the pick must then meet its bounds (reliableq.queue.planguard).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from reliableq.queue.sql import COUNT, EDGE, WORKFLOW

from . import tables
from .conftest import Figures
from .explain import Plan
from .worker_path import STATEMENTS, Statement, measure

STATES: dict[str, Callable[[tables.Mix], None]] = {
    "never analyzed": tables.never_analyzed,
    "analyzed empty": tables.analyzed_empty,
    "analyzed at 300 rows": tables.analyzed_small,
    "analyzed mid-load": tables.analyzed_mid_load,
}


def problems(statement: Statement, plan: Plan) -> list[str]:
    found = []
    if plan.buffers > statement.buffers:
        found.append(f"{plan.buffers} buffers (bound {statement.buffers})")
    for table in (tables.JOB, tables.ATTEMPT):
        if (rows := plan.rows_read(table)) > statement.rows:
            found.append(f"looks at {rows} rows of {table} (bound {statement.rows})")
        if "Seq Scan" in plan.scans(table):
            found.append(f"reads all of {table}")
    found += [f"nested loop over a whole index: {join}" for join in plan.unbounded_joins()]
    return [f"{statement.name}: {' '.join(plan.sql.split())[:70]}...: {p}" for p in found]


def check_worker_path(
    state: str, figures: Figures, *, generic: bool = False, statements: Sequence[Statement] = STATEMENTS
) -> list[str]:
    """Measure every statement in the tables' present state; repair with the guards; what is still wrong.

    `generic`: the plans PostgreSQL makes without the parameters' values, which a statement the
    worker prepares may settle on after five executions; they must keep the same bounds."""
    over: list[Statement] = []
    failures: list[str] = []
    prepared: set[str] = set()
    for statement in statements:
        plans = measure(statement, generic=generic)
        prepared |= {statement.name for plan in plans if plan.generic}
        for plan in plans:
            figures.add(state=state, statement=statement.name, phase="as planned", plan=plan)
        wrong = [p for plan in plans for p in problems(statement, plan)]
        if wrong and statement.guard is not None:
            over.append(statement)
        else:
            failures += wrong
    # The guards run after every statement was measured, since their ANALYZE changes the state.
    for statement in over:
        assert statement.guard is not None
        if not statement.guard():
            pass  # an earlier guard's ANALYZE may have repaired this one's statistics too
        plans = measure(statement, generic=generic)
        for plan in plans:
            figures.add(state=state, statement=statement.name, phase="after guard", plan=plan)
        failures += [p for plan in plans for p in problems(statement, plan)]
    if generic and statements is STATEMENTS:
        # The statements the worker prepares (reliableq.queue.db.run) were explained generically.
        assert {"claim", "claim_queues", "claim_floored", "renew", "finish", "finish_members"} <= prepared, prepared
    return failures


@pytest.mark.parametrize("plan", ["custom", "generic"])
@pytest.mark.parametrize("state", list(STATES))
def test_every_worker_statement_stays_within_fixed_bounds(
    state: str, plan: str, plan_tables: None, figures: Figures
) -> None:
    STATES[state](tables.WORKING_SET)
    failures = check_worker_path(state, figures, generic=plan == "generic")
    assert not failures, "\n".join(failures) + "\n" + figures.table()


@pytest.mark.nightly  # a million rows to load: minutes under coverage (pytest -m nightly)
def test_every_worker_statement_stays_within_fixed_bounds_beside_a_million_finished_jobs(
    plan_tables: None, figures: Figures
) -> None:
    """A million finished jobs, analyzed, then a burst arrives: the statistics say nothing is due.

    Then the same after ANALYZE, with statistics that are right: the pile-up itself costs nothing.
    """
    tables.pile_up(1_000_000)(tables.WORKING_SET)
    failures = check_worker_path("1M finished, then burst", figures)
    failures += check_worker_path("1M finished, then burst", figures, generic=True)
    tables.analyze()
    failures += check_worker_path("1M finished, analyzed", figures)
    assert not failures, "\n".join(failures) + "\n" + figures.table()


def test_every_worker_statement_stays_within_fixed_bounds_with_the_workflow_tables_analyzed_empty(
    plan_tables: None, figures: Figures
) -> None:
    """The workflow tables' statistics are whatever their last analyze saw: here, nothing at all.

    The end of a member counts down its dependents through the edges; joined to the ended jobs,
    the edges analyzed empty were planned as a scan of all of them for each job ended (by the
    finish of members, the rescue, a cancel)."""
    for table in (EDGE, COUNT, WORKFLOW):
        tables._exec(f"ANALYZE {table}")
    tables.pile_up(100_000)(tables.WORKING_SET)
    failures = check_worker_path("workflow tables analyzed empty", figures)
    failures += check_worker_path("workflow tables analyzed empty", figures, generic=True)
    assert not failures, "\n".join(failures) + "\n" + figures.table()
