"""The one seam where a job changes state for good: it ends (SUCCEEDED, DEAD, CANCELLED), or a
replay reopens it (DEAD to PENDING).

Every statement that makes such a change (the finish, the rescue, the release of an
unacknowledged claim, a cancel, a purge, a replay) names the jobs it changed in a CTE with `id`,
`status` and `workflow_id` columns and adds `after(that_cte, change)` to its WITH list. What must happen with
the change, in the same statement and so atomically with it (a workflow releasing the jobs that
waited for this one, say), registers a hook here and reaches all six at once. With no hook, the
seam adds nothing: no CTE, no cost.

A hook is a function of (source, change) returning CTEs over the rows of `source` (id, status,
workflow_id): `name AS (...)`, comma-separated, the last of them data-modifying (a CTE that only
reads runs only if something reads it), or "" to do nothing for that change. A hook that concerns
only workflow members is registered with `members_only`: a statement whose jobs are known to have
no workflow (the worker's usual finish) leaves it out. Hooks are registered at import (an app's
ready()); registering clears the statements compiled before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..models import JobStatus
from . import db
from .sql import JOB, lit

ENDED = "ended"  # to SUCCEEDED, DEAD or CANCELLED
REOPENED = "reopened"  # DEAD back to PENDING (a replay)
FINAL = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)

Hook = Callable[[str, str], str]
_hooks: dict[str, tuple[Hook, bool]] = {}  # name: (hook, members_only)
# name: an SQL condition over the hook's CTEs of an end, true when what the statement did needs a
# second look in a statement of its own (a fresh snapshot) before the transaction commits.
_rechecks: dict[str, str] = {}
# Functions that cache compiled statements with the seam in them, cleared when the hooks change.
_cached: list[Callable[[], None]] = []


def register(name: str, hook: Hook, *, members_only: bool = False, recheck: str | None = None) -> None:
    if not name.isidentifier():
        raise ValueError(f"A hook's name becomes a CTE's name: {name!r} is not an identifier.")
    _hooks[name] = (hook, members_only)
    if recheck is None:
        _rechecks.pop(name, None)
    else:
        _rechecks[name] = recheck
    _clear()


def unregister(name: str) -> None:
    _hooks.pop(name, None)
    _rechecks.pop(name, None)
    _clear()


def recheck(*, members: bool = True) -> str:
    """An SQL condition, in a statement that has after(source, ENDED, members=members), true when a
    hook asks for a second look at what it did (its recheck); `false` when no hook can."""
    found = [condition for name, condition in _rechecks.items() if members or not _hooks[name][1]]
    return f"({' OR '.join(found)})" if found else "false"


@contextmanager
def registered(name: str, hook: Hook, *, members_only: bool = False) -> Iterator[None]:
    register(name, hook, members_only=members_only)
    try:
        yield
    finally:
        unregister(name)


def caches(clear: Callable[[], None]) -> None:
    """Say that a statement cache holds the seam: it is cleared whenever a hook comes or goes."""
    _cached.append(clear)


def _clear() -> None:
    for clear in _cached:
        clear()


def after(source: str, change: str, *, members: bool = True) -> str:
    """The CTEs to add to a statement, after its CTE `source` (id, status, workflow_id of the jobs it
    changed): each hook's, over the rows of `source` that made `change`. Starts with a comma; empty
    without hooks. `members=False`: none of the jobs is a workflow's, so members_only hooks stay out."""
    hooks = [(name, hook) for name, (hook, only) in _hooks.items() if members or not only]
    if not hooks:
        return ""
    statuses = FINAL if change == ENDED else (JobStatus.PENDING,)
    rows = f"seam_{change}"
    parts = [f",\n{rows} AS MATERIALIZED (SELECT id, status, workflow_id FROM {source}"
             f" WHERE status IN ({', '.join(lit(s) for s in statuses)}))"]  # fmt: skip
    for _, hook in hooks:
        ctes = hook(rows, change)
        if ctes:
            parts.append(f",\n{ctes}")
    return "".join(parts) if len(parts) > 1 else ""


def cancel_pending(job_id: Any) -> bool:
    """PENDING (or a workflow's WAITING) to CANCELLED (an operator's cancel), through the seam; False
    if the job was neither."""
    return _move(
        f"""UPDATE {JOB} SET status = {lit(JobStatus.CANCELLED)}, finished_at = now(), updated_at = now()
             WHERE id = %s AND status IN ({lit(JobStatus.PENDING)}, {lit(JobStatus.WAITING)})
         RETURNING id, status, workflow_id""",
        [job_id],
        ENDED,
    )


def reopen(job_id: Any, *, max_attempts: int) -> bool:
    """DEAD to PENDING (a replay) with a fresh budget, at once, through the seam; False if not DEAD.

    A cancel asked of the run that died is not a request of the replayed one: it is cleared."""
    return _move(
        f"""UPDATE {JOB} SET status = {lit(JobStatus.PENDING)}, max_attempts = %s, run_at = now(),
                   finished_at = NULL, cancel_requested_at = NULL, updated_at = now()
             WHERE id = %s AND status = {lit(JobStatus.DEAD)} RETURNING id, status, workflow_id""",
        [max_attempts, job_id],
        REOPENED,
    )


def _move(update: str, params: list[Any], change: str) -> bool:
    from . import workflows

    with db.atomic(), db.cursor() as cursor:
        cursor.execute(f"WITH moved AS ({update}){after('moved', change)} SELECT id FROM moved", params)
        moved = [row[0] for row in cursor.fetchall()]
        if change == ENDED:
            workflows.cancel_stuck(moved)
        return bool(moved)
