"""The one door through which a job's status changes.

Every statement that changes `Job.status` is made here, by statement(): the claim (PENDING to
RUNNING), every end (the finish, the rescue, the release of an unacknowledged claim, a cancel, a
purge, a workflow's cancel, the rest of a cancel handed on), a replay's reopening (DEAD to
PENDING), an emit's or a timeout's wake of jobs waiting for an event (WAITING to PENDING). The
caller gives what it changes as an UPDATE returning at least (id, status, workflow_id), named
`moved`; the door adds what must happen with the change, in the same statement, so atomically with
it:

- an end (Change.ENDED) of workflow members counts them, releases what waited on them, cancels
  what they doomed (a bounded share, the rest handed on), ends their workflow and fires its
  callbacks (reliableq.queue.graph); for a batch of successes, what a count at zero decides is
  ZEROED_SQL's, sent by follow() in the same transaction only when a count reached zero;
- a reopening (Change.REOPENED) gives those counts back and starts a new run;
- a start (Change.STARTED), or a wake of a job that waited for an event (Change.WOKEN), needs nothing
  more; a job parked to wait (job.wait_for) or to sleep is a finish that ends nothing.

After the statement, run() (or follow(), for a caller that executes it its own way) does what
follows it in its transaction: ZEROED_SQL, and the one thing that needs a fresh snapshot,
cancel_stuck(), when the statement says so. Each statement
begins with `/* reliableq:<name> */`, so that it is found by name in pg_stat_statements and in
tests/integration/test_door.py, which fails if a status changes by any other statement.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.db.backends.utils import CursorWrapper

from . import db, graph
from .sql import CASCADE_TABLE, COUNT, EDGE, JOB, S

MARK = "/* reliableq:"  # how every statement of the door begins


class Change(enum.Enum):
    STARTED = "started"  # PENDING to RUNNING (a claim)
    WOKEN = "woken"  # a job waiting for an event to PENDING (an emit, or its wait's timeout)
    ENDED = "ended"  # to SUCCEEDED, DEAD or CANCELLED; a retry or a snooze back to PENDING passes through
    REOPENED = "reopened"  # DEAD back to PENDING (a replay)


# What each change makes of the rows of `moved` that concern the door (the others pass through).
_STATUSES = {
    Change.ENDED: (S.SUCCEEDED, S.DEAD, S.CANCELLED),
    Change.REOPENED: (S.PENDING,),
}


def statement(
    name: str,
    *,
    moved: str | None,
    change: Change,
    tail: str,
    head: str = "",
    members: bool = True,
    succeeded: bool = False,
) -> str:
    """`WITH <head> moved AS (<moved>) <what follows the change> <tail>`, marked with its name.

    `moved` is an UPDATE of jobs returning (id, status, workflow_id, ...), or None for a statement
    that only goes on with a cancel handed on (graph.ended(None)); `head` gives CTEs before it
    (ending with a comma); `tail` ends the statement, reading `moved`, and returns the rows the
    caller wants with recheck(members) as their last column. `members=False`: none of the jobs is a
    workflow's, and nothing follows; `succeeded=True`: every member among them ends in success
    (graph.ended)."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"A statement's name is a word: {name!r}")
    if moved is None:  # a cancel handed on: only what follows it
        if change is not Change.ENDED:
            raise ValueError("Only an end goes on without a statement of its own.")
        none = "SELECT NULL::uuid AS id, NULL::text AS status, NULL::uuid AS workflow_id WHERE false"
        return f"{MARK}{name} */ WITH {head}\nmoved AS ({none}),\n{graph.ended(None)}\n{tail}"
    return f"{MARK}{name} */ WITH {head}\nmoved AS ({moved}){_follows(change, members, succeeded)}\n{tail}"


def _follows(change: Change, members: bool, succeeded: bool) -> str:
    if change in (Change.STARTED, Change.WOKEN) or not members:
        return ""
    statuses = ", ".join(_STATUSES[change])
    rows = f""",
door_moved AS MATERIALIZED (SELECT id, status, workflow_id FROM moved WHERE status IN ({statuses})),"""
    if change is Change.ENDED:
        return f"{rows}\n{graph.ended('door_moved', succeeded=succeeded)}"
    return f"{rows}\n{graph.reopened('door_moved')}"


def recheck(*, members: bool = True, succeeded: bool = False) -> str:
    """The last column of a door statement's rows: whether what it did needs cancel_stuck; for a
    statement made with `succeeded=True`, the counts it brought to zero (graph.ZEROS), for follow()."""
    if succeeded:
        return f"{graph.ZEROS}::text"
    return graph.RECHECK if members else "false"


# What a successes' statement leaves to the rest of its transaction when its counts reached zero.
ZEROED_SQL = f"""{MARK}zeroed */ WITH {graph.zeroed_sql()}
SELECT (SELECT count(*) FROM wf_released), (SELECT count(*) FROM wf_callbacks)"""


def run(cursor: CursorWrapper, sql: str, params: Sequence[Any], *, prepared: bool = False) -> list[tuple[Any, ...]]:
    """Execute a door statement on `cursor`, in the caller's transaction; its rows, without recheck.

    Each of them walks a workflow's graph, so it is planned without JIT (db.without_jit)."""
    db.without_jit()
    if prepared:
        db.run(cursor, sql, params)
    else:
        cursor.execute(sql, params)
    rows = cursor.fetchall()
    follow(rows)
    return [row[:-1] for row in rows]


def follow(rows: Sequence[tuple[Any, ...]], *, succeeded: bool = False) -> None:
    """What follows a door statement once it has run (rows: the job id first, recheck last), in the
    same transaction: cancel_stuck() of the jobs it changed when it asks for it. (The finish reads
    its rows with the recheck still on them: no row copied per job.) A statement made with
    `succeeded=True` gives the counts it brought to zero instead: what they decide is made by
    ZEROED_SQL first, then cancel_stuck() where one of them carried a failure."""
    if succeeded:
        zeros = rows[0][-1] if rows else None
        if zeros is None:
            return
        db.fetch(ZEROED_SQL, [zeros])
        if not any(failed for _, failed, _ in json.loads(zeros)):
            return
    elif not any(row[-1] for row in rows):
        return
    cancel_stuck([row[0] for row in rows if row[0] is not None])


# Members whose every upstream has ended, some of them not in success, that still wait: an end and a
# replay that re-waited the member, concurrent, each read the other's rows before it committed (the
# end's snapshot saw the member cancelled, the replay's saw the upstream running). Their counts,
# read under the count's lock, cannot be wrong; the release leaves them, and cancel_stuck cancels
# them in the transaction of the end that made their count zero.
_STUCK_SQL = f"""
    SELECT s.target, (SELECT count(*) FROM {EDGE} o WHERE o.upstream = s.target) FROM (
        SELECT DISTINCT e.target FROM {EDGE} e
         CROSS JOIN LATERAL (SELECT c.remaining, c.failed FROM {COUNT} c
                              WHERE c.target = e.target AND c.shard = -1 OFFSET 0) c
         CROSS JOIN LATERAL (SELECT j.id FROM {JOB} j WHERE j.id = e.target AND j.status = {S.WAITING}
                                AND j.waiting_for IS NULL AND j.on_upstream_failure = {S.cancel} OFFSET 0) j
         WHERE e.upstream = ANY(%s::uuid[]) AND c.remaining = 0 AND c.failed > 0
    ) s
"""

_HAND_ON_SQL = f"""
    INSERT INTO {CASCADE_TABLE} (member, workflow, created_at)
    SELECT j.id, j.workflow_id, now() FROM {JOB} j WHERE j.id = ANY(%s::uuid[]) AND j.workflow_id IS NOT NULL
    ON CONFLICT (member) DO NOTHING
"""

_CANCEL_STUCK_SQL = statement(
    "cancel_stuck",
    moved=f"""UPDATE {JOB} j SET status = {S.CANCELLED}, finished_at = now(), updated_at = now(),
                     last_error = '{graph.UPSTREAM_CANCELLED} members ended DEAD or CANCELLED before it could run'
               WHERE j.id = ANY(%s::uuid[]) AND j.status = {S.WAITING} AND j.waiting_for IS NULL
           RETURNING j.id, j.status, j.workflow_id""",
    change=Change.ENDED,
    tail=f"SELECT id, {recheck()} FROM moved",
)


def _bounded(stuck: list[tuple[uuid.UUID, int]]) -> list[uuid.UUID]:
    """The first of `stuck` (id, edges out) within one statement's bound (WALK, WALK_EDGES), at least one."""
    taken: list[uuid.UUID] = []
    edges = 0
    for member, out in stuck[: graph.WALK]:
        edges += out
        if taken and edges > graph.WALK_EDGES:
            break
        taken.append(member)
    return taken


def cancel_stuck(ended: Sequence[uuid.UUID]) -> int:
    """In the caller's transaction, after members in `ended` ended: cancel their dependents left
    waiting with every upstream ended and some failed (and what follows from that), within one
    statement's bound, handing the rest on. Returns how many. One indexed read when there are none,
    which is nearly always.

    One round: what these cancels leave waiting in turn, their own walk cancels or hands on."""
    ended = list(ended)
    if not ended:
        return 0
    with db.cursor() as cursor:
        db.run(cursor, _STUCK_SQL, [ended])
        found = [(row[0], int(row[1])) for row in cursor.fetchall()]
        if not found:
            return 0
        stuck = _bounded(found)
        if len(stuck) < len(found):  # the rest are handed on, to be cancelled in steps of their own
            cursor.execute(_HAND_ON_SQL, [[member for member, _ in found[len(stuck) :]]])
        cursor.execute(_CANCEL_STUCK_SQL, [stuck])
        return len(cursor.fetchall())
