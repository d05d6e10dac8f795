"""What every statement of the queue layer shares: table names, status values as SQL literals
(taken from JobStatus and Outcome, never typed by hand), and the fragments that keep each
statement's plan on keys (see the package's docstring)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

from ..models import (
    Attempt,
    Event,
    Job,
    JobStatus,
    OnUpstreamFailure,
    Outcome,
    QueueState,
    RateWindow,
    ReturnValue,
    Step,
    Workflow,
    WorkflowCascade,
    WorkflowCount,
    WorkflowEdge,
    WorkflowStatus,
)


def lit(value: str) -> str:
    """A status, an outcome or a member's on_upstream_failure as an SQL literal ('RUNNING'): only the
    models' own values are allowed."""
    if value not in _VALUES:
        raise ValueError(f"{value!r} is not a JobStatus, a WorkflowStatus, an Outcome or an OnUpstreamFailure.")
    return f"'{value}'"


_VALUES = (
    frozenset(JobStatus.values)
    | frozenset(Outcome.values)
    | frozenset(WorkflowStatus.values)
    | frozenset(OnUpstreamFailure.values)
)
# S.RUNNING is "'RUNNING'": every status and outcome a statement names, from the models' choices.
S: Any = SimpleNamespace(**{value: lit(value) for value in sorted(_VALUES)})


JOB = Job._meta.db_table


ATTEMPT = Attempt._meta.db_table


RETURN_VALUE = ReturnValue._meta.db_table


QUEUE = QueueState._meta.db_table


RATE = RateWindow._meta.db_table


WORKFLOW = Workflow._meta.db_table


EDGE = WorkflowEdge._meta.db_table


COUNT = WorkflowCount._meta.db_table


CASCADE_TABLE = WorkflowCascade._meta.db_table


STEP = Step._meta.db_table


EVENT = Event._meta.db_table


DUE_INDEX = "reliableq_job_due"  # the partial index every pick of due jobs should read


# The owner's fence, status half: checked on every row, like `status = 'RUNNING'`, but never used
# to choose an index: the lease index (or the admin's status index) would read every RUNNING job
# of the fleet to renew or finish a worker's few, where the primary key reads just those.
RUNNING_FENCE = f"(j.status = {S.RUNNING}) IS TRUE"


def json_value(value: Any) -> dict[str, Any]:
    # Django registers a text loader for jsonb on psycopg 3, so raw cursors see strings.
    return cast(dict[str, Any], json.loads(value) if isinstance(value, str) else value)


def filter_only(condition: str) -> str:
    """A condition the planner checks on each row it reads but never uses to choose an index.

    The admin's history indexes (queue, kind or status, then created_at) match a plain condition
    on those columns. With statistics that underrate the matching rows, the planner may then
    read the whole history of a queue or a kind to find a few due or expired rows. In a WHERE
    clause `(...) IS TRUE` means the same, and no index matches it.
    """
    return f"({condition}) IS TRUE"


def attempts_of(keys: str, match: str) -> str:
    """SQL: an ARRAY of the ids of the attempts that `match` finds, at most one (the newest) per row of `keys`.

    `keys` names a CTE or list with an `id` column (job ids); `match` may use its row as k and the
    attempt as o. Each row gets its own probe of the (job_id, number) index: a LIMIT inside an
    index-ordered subquery, which no statistics can turn into a scan (job_id is not unique, so
    with no statistics a plain `job_id = ANY(...)` of many ids looks like most of the table).
    """
    return (
        f"ARRAY(SELECT o.id FROM {keys} AS k CROSS JOIN LATERAL ("
        f"SELECT o.id FROM {ATTEMPT} o WHERE o.job_id = k.id AND {match} ORDER BY o.number DESC LIMIT 1) AS o)"
    )
