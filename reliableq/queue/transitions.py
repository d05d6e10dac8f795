"""The one seam where a job changes state for good: it ends (SUCCEEDED, DEAD, CANCELLED), or a
replay reopens it (DEAD to PENDING).

Every statement that makes such a change (the finish, the rescue, the release of an
unacknowledged claim, a cancel, a purge, a replay) names the jobs it changed in a CTE with `id`
and `status` columns and adds `after(that_cte, change)` to its WITH list. What must happen with
the change, in the same statement and so atomically with it (a workflow releasing the jobs that
waited for this one, say), registers a hook here and reaches all six at once. With no hook, the
seam adds nothing: no CTE, no cost.

A hook is a function of (source, change) returning the body of a data-modifying CTE over the
rows of `source` (id, status), or "" to do nothing for that change. Hooks are registered at
import (an app's ready()); registering clears the statements compiled before.
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
_hooks: dict[str, Hook] = {}
# Functions that cache compiled statements with the seam in them, cleared when the hooks change.
_cached: list[Callable[[], None]] = []


def register(name: str, hook: Hook) -> None:
    if not name.isidentifier():
        raise ValueError(f"A hook's name becomes a CTE's name: {name!r} is not an identifier.")
    _hooks[name] = hook
    _clear()


def unregister(name: str) -> None:
    _hooks.pop(name, None)
    _clear()


@contextmanager
def registered(name: str, hook: Hook) -> Iterator[None]:
    register(name, hook)
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


def after(source: str, change: str) -> str:
    """The CTEs to add to a statement, after its CTE `source` (id, status of the jobs it changed):
    each hook's, over the rows of `source` that made `change`. Starts with a comma; empty without hooks."""
    if not _hooks:
        return ""
    statuses = FINAL if change == ENDED else (JobStatus.PENDING,)
    rows = f"seam_{change}"
    parts = [f",\n{rows} AS MATERIALIZED (SELECT id, status FROM {source}"
             f" WHERE status IN ({', '.join(lit(s) for s in statuses)}))"]  # fmt: skip
    for name, hook in _hooks.items():
        body = hook(rows, change)
        if body:
            parts.append(f",\nseam_{name} AS ({body})")
    return "".join(parts) if len(parts) > 1 else ""


def cancel_pending(job_id: Any) -> bool:
    """PENDING to CANCELLED (an operator's cancel), through the seam; False if the job was not PENDING."""
    return _move(
        f"""UPDATE {JOB} SET status = {lit(JobStatus.CANCELLED)}, finished_at = now(), updated_at = now()
             WHERE id = %s AND status = {lit(JobStatus.PENDING)} RETURNING id, status""",
        [job_id],
        ENDED,
    )


def reopen(job_id: Any, *, max_attempts: int) -> bool:
    """DEAD to PENDING (a replay) with a fresh budget, at once, through the seam; False if not DEAD.

    A cancel asked of the run that died is not a request of the replayed one: it is cleared."""
    return _move(
        f"""UPDATE {JOB} SET status = {lit(JobStatus.PENDING)}, max_attempts = %s, run_at = now(),
                   finished_at = NULL, cancel_requested_at = NULL, updated_at = now()
             WHERE id = %s AND status = {lit(JobStatus.DEAD)} RETURNING id, status""",
        [max_attempts, job_id],
        REOPENED,
    )


def _move(update: str, params: list[Any], change: str) -> bool:
    with db.cursor() as cursor:
        cursor.execute(f"WITH moved AS ({update}){after('moved', change)} SELECT count(*) FROM moved", params)
        return bool(cursor.fetchone()[0])
