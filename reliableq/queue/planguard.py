"""Stale statistics, caught before a claim pays for them: analyze when the pick would leave its index.

Every write on the worker's path reaches its rows by key (see reliableq.queue): no statistics
can make it read more than those rows (and, for the few that look for RUNNING jobs, the fleet's
RUNNING rows). The picks cannot do that: a claim must choose its due rows by status, queue,
priority and run_at, and the admin's history indexes (status, queue or kind, then created_at)
match those conditions too. When the statistics say the backlog is empty while it holds thousands
of rows (right after a TRUNCATE and a bulk load, or a burst after a quiet million finished rows),
all those plans look equally cheap, and the planner may read every PENDING row, or every row of
the queue, and sort them, on every claim, until autovacuum analyzes the table again (a minute
or more later, and not at all while the burst is under a tenth of the table).

So, once per rescue interval (jobqueue.claim with rescue) and once per prune run, the pick is put
to the planner; if on a table of some size its plan would not read the pick's own index, the
statistics are stale and the job table is analyzed there and then. Fleet-wide at most one
ANALYZE runs at a time and at most one a minute (by PostgreSQL's own clock of the last one,
pg_stat_user_tables.last_analyze); autovacuum's own analyzes do not count, since one of those,
run in the middle of a bulk load, is how the statistics went wrong in the first place.

The writes need no such check of their plans, but they have one weakness of their own: a worker
prepares its hot statements (reliableq.queue.db.run), and PostgreSQL keeps the generic plan it
made after their first runs until the statistics of a table they read change. Made while a table
held a few pages, that plan scans it, and keeps scanning it however large it grows: a burst after
a quiet, vacuumed-empty table ran the finish through a scan of every attempt, ten times slower.
So a table holding GROWTH times the committed rows its statistics say is analyzed too (keep_up),
which replaces every session's cached plans that read it. Growth bounds the cost: one ANALYZE
per fourfold growth, whatever the clock says.
"""

from __future__ import annotations

import json
import logging
from typing import Any, cast

from django.db import DatabaseError

from . import db

logger = logging.getLogger("reliableq.planguard")

MIN_PAGES = 128  # below this (1 MB) any plan of a pick is cheap: never analyze for it
GROWTH = 4  # a table with this many times the rows its statistics describe is analyzed (keep_up)
REANALYZE_SECONDS = 60.0  # at most one ANALYZE by the guard (or by anyone) per table per minute
LOCK_TIMEOUT = "1s"  # ANALYZE waits at most this long behind a VACUUM before giving up
_ADVISORY_KEY = "reliableq:planguard"


def scans(plan: dict[str, Any], table: str) -> list[str]:
    """The index (or the scan type, without one) of every node of `plan` that reads `table`."""
    found = []
    if plan.get("Relation Name") == table:
        found.append(plan.get("Index Name") or plan["Node Type"])
    for child in plan.get("Plans", []):
        found += scans(child, table)
    return found


def plan_of(sql: str, params: Any) -> dict[str, Any]:
    """The planner's plan for a statement (EXPLAIN without ANALYZE: nothing runs, nothing locks)."""
    with db.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)  # inline: the text is the caller's statement
        document = cursor.fetchone()[0]
    document = json.loads(document) if isinstance(document, str) else document
    return cast(dict[str, Any], document[0]["Plan"])


_PAGES_SQL = """
            SELECT pg_relation_size(c.oid) / current_setting('block_size')::int, c.reltuples,
                   coalesce(extract(epoch FROM now() - s.last_analyze), 'Infinity')
              FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE c.oid = %s::regclass
            """


def keep_index(sql: str, params: Any, *, table: str, index: str) -> bool:
    """Analyze `table` if the planner would read it for this statement other than through `index`.

    Returns whether it analyzed. Never raises for the guard's own sake: a lock it cannot get
    in time or a refusal leaves the statistics to autovacuum, with a warning in the log.
    """
    with db.cursor() as cursor:
        cursor.execute(
            _PAGES_SQL,
            [table],
        )
        pages, reltuples, since_analyze = cursor.fetchone()
    if pages < MIN_PAGES or since_analyze < REANALYZE_SECONDS:
        return False
    used = scans(plan_of(sql, params), table)
    if all(name == index for name in used):
        return False
    had = "never analyzed" if reltuples < 0 else f"{reltuples:.0f} rows when last analyzed"
    return _analyze(table, f"{had}; {pages} pages now): a pick would read it through {', '.join(used)}, not {index}")


_GROWTH_SQL = """
            SELECT c.relname, c.reltuples, s.n_live_tup, pg_relation_size(c.oid) / current_setting('block_size')::int
              FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE c.oid = ANY(%s::regclass[])
            """


def keep_up(tables: list[str]) -> list[str]:
    """Analyze each of `tables` whose committed rows have grown GROWTH-fold since its statistics.

    Returns the tables it analyzed. The statistics' count is pg_class.reltuples, which ANALYZE and
    VACUUM (autovacuum's too) set: whoever took them last, the next ANALYZE waits for the table
    to quadruple again. Committed rows, not pages: pages grow under a bulk load that has not
    committed, and an ANALYZE then would see thousands of pages and no rows, the state that
    sends a pick off its index (see above); pg_stat_user_tables.n_live_tup counts a load once it
    commits (a second or so later), and an ANALYZE taken mid-load by anyone is then repaired.
    Never raises for the guard's own sake, as keep_index.
    """
    with db.cursor() as cursor:
        cursor.execute(
            _GROWTH_SQL,
            [tables],
        )
        sizes = cursor.fetchall()
    grown = [(t, was, now) for t, was, now, pages in sizes if pages >= MIN_PAGES and now >= GROWTH * max(was, 1)]
    stale = "plans cached for it would be stale"
    return [
        table
        for table, was, now in grown
        if _analyze(table, f"{max(was, 0):.0f} rows at its last analyze or vacuum, {now} now): {stale}")
    ]


_ANALYZE_LOCK_SQL = "SELECT pg_try_advisory_xact_lock(hashtext(%s))"


_SET_LOCK_TIMEOUT_SQL = "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)"


_RESET_LOCK_TIMEOUT_SQL = "SELECT set_config('lock_timeout', %s, true)"


def _analyze(table: str, why: str) -> bool:
    """ANALYZE `table` now, unless another session is at it; False if it could not."""
    try:
        with db.atomic(), db.cursor() as cursor:
            cursor.execute(_ANALYZE_LOCK_SQL, [f"{_ADVISORY_KEY}:{table}"])
            if not cursor.fetchone()[0]:
                return False  # another worker is analyzing it right now
            logger.warning("statistics of %s look stale (%s; analyzing", table, why)
            cursor.execute(_SET_LOCK_TIMEOUT_SQL, [LOCK_TIMEOUT])
            before = cursor.fetchone()[0]
            cursor.execute(f"ANALYZE {db.connection().ops.quote_name(table)}")  # inline: the text is a table's name
            cursor.execute(_RESET_LOCK_TIMEOUT_SQL, [before])  # the caller's own again
    except DatabaseError as exc:
        logger.warning("could not analyze %s (%s); autovacuum will", table, exc)
        return False
    return True
