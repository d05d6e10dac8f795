"""The queue layer: the only code that talks SQL to the queue's tables.

claims (pick, limits) takes due jobs into a worker's slots, rescues takes back expired leases,
finishes writes what an owner does under its lease, records holds what they hand out and take
back, sql what every statement shares. Statements are composed by parameters, never by editing
another statement's text.

Each statement that acts for an owner is fenced with ``status = 'RUNNING' AND lease_token = <token>``:
a worker whose lease was taken back updates zero rows and so changes nothing. Time always
comes from the database (``now()``), never from a worker's clock.

Plans that no statistics can spoil. Right after a TRUNCATE and a bulk load the statistics can
say a table holds one row while it holds thousands; the planner then costs a walk over a whole
index like a single lookup, and a join to the table can become a nested loop over that index
for each row on the other side (the rescue once ran for minutes that way). So:

- a write finds its job rows with ``j.id = ANY(...)`` on the table itself, never through a join
  alone: the primary key is then the one index that fits, whatever the statistics say;
- an attempt is found by one probe per job of the (job_id, number) index (``sql.attempts_of``),
  then written by its own primary key;
- a condition that an admin history index would match (queue, kind, status, each then
  created_at) is a filter only (``sql.filter_only``, ``sql.RUNNING_FENCE``) where it is not the pick's own;
- a pick (due rows, expired leases) reads its partial index in order under a LIMIT; when stale
  statistics would still send it elsewhere, reliableq.queue.planguard analyzes the table.

tests/plans holds each statement to fixed bounds in each statistics state.
"""

from __future__ import annotations

from .claims import claim
from .finishes import finish, mark_lost, record_progress, release_unacknowledged, renew
from .limits import rate_shards, shard_room
from .pick import guard_claims, guard_tables
from .records import ClaimedJob, Finish, FinishResult, Rescued, progress_value
from .rescues import RESCUE_BATCH, rescue
from .sql import DUE_INDEX
from .workflows import cascade

__all__ = [
    "DUE_INDEX",
    "RESCUE_BATCH",
    "ClaimedJob",
    "Finish",
    "FinishResult",
    "Rescued",
    "cascade",
    "claim",
    "finish",
    "guard_claims",
    "guard_tables",
    "mark_lost",
    "progress_value",
    "rate_shards",
    "record_progress",
    "release_unacknowledged",
    "renew",
    "rescue",
    "shard_room",
]
