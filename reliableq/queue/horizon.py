"""What holds back vacuum on the queue's database: the oldest snapshot, and the dead rows it keeps.

A long transaction (a report under REPEATABLE READ, pg_dump, a session left idle in a
transaction), a forgotten prepared transaction or a replication slot keeps every row version
that its snapshot might still see. Claimed and finished jobs then leave dead index entries that
each claim walks past, and the queue slows down while nothing looks wrong. These numbers say so
early: the age of that oldest holder, and the dead rows in the queue's tables.

Sessions of other roles are visible in pg_stat_activity only to superusers and members of
pg_read_all_stats (pg_monitor): grant it to the role that serves metrics, or the age counts only
that role's own sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import Attempt, Job, ReturnValue
from . import db

TABLES = (Job._meta.db_table, Attempt._meta.db_table, ReturnValue._meta.db_table)


@dataclass(frozen=True, slots=True)
class Horizon:
    age_seconds: float  # of the oldest open snapshot or prepared transaction (0 when none)
    age_xids: int  # transactions since the oldest xmin of any holder, replication slots included
    holder: str  # what holds it, for people: "pid 123 (idle in transaction, psql)", "prepared 'x'", ...


_HORIZON_SQL = """
            WITH holders AS (
                SELECT extract(epoch FROM now() - xact_start)::float8 AS seconds, age(backend_xmin) AS xids,
                       format('pid %s (%s, %s)', pid, state, COALESCE(NULLIF(application_name, ''), usename)) AS who
                  FROM pg_stat_activity
                 WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
                UNION ALL
                SELECT extract(epoch FROM now() - prepared)::float8, age(transaction), format('prepared %L', gid)
                  FROM pg_prepared_xacts WHERE database = current_database()
                UNION ALL
                SELECT NULL, greatest(age(xmin), age(catalog_xmin)), format('replication slot %L', slot_name)
                  FROM pg_replication_slots
                 WHERE (database = current_database() OR database IS NULL)
                   AND (xmin IS NOT NULL OR catalog_xmin IS NOT NULL)
            )
            SELECT COALESCE(max(seconds), 0), COALESCE(max(xids), 0),
                   COALESCE((SELECT who FROM holders ORDER BY xids DESC NULLS LAST LIMIT 1), '')
              FROM holders
            """


def horizon() -> Horizon:
    """The oldest holder of this database's xmin horizon, by database time."""
    with db.cursor() as cursor:
        cursor.execute(_HORIZON_SQL)
        seconds, xids, who = cursor.fetchone()
    return Horizon(age_seconds=max(0.0, float(seconds)), age_xids=int(xids), holder=who)


_DEAD_TUPLES_SQL = "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname = ANY(%s)"


def dead_tuples() -> dict[str, int]:
    """Dead row versions per queue table, as the statistics collector last counted them."""
    with db.cursor() as cursor:
        cursor.execute(_DEAD_TUPLES_SQL, [list(TABLES)])
        found = dict(cursor.fetchall())
    return {table: int(found.get(table, 0)) for table in TABLES}
