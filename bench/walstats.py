"""Where a stretch of WAL went: bytes by relation and record type (pg_walinspect).

A WAL record that changes pages names them (block references); the record's bytes are counted
to the relation of its first block, its full-page images to theirs. Records that name no block
(commits, running transactions) are counted under "no relation". Read right after the stretch
was written: a checkpoint that completes in between may recycle its segments, and then there
is nothing to read (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

BREAKDOWN = """
    WITH records AS (
        SELECT start_lsn, resource_manager, record_type, record_length, fpi_length
          FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)
    ),
    firsts AS (
        SELECT DISTINCT ON (start_lsn) start_lsn, reltablespace, relfilenode
          FROM pg_get_wal_block_info(%s::pg_lsn, %s::pg_lsn, false)
         ORDER BY start_lsn, block_id
    )
    SELECT coalesce(pg_filenode_relation(f.reltablespace, f.relfilenode)::text,
                    CASE WHEN f.relfilenode IS NULL THEN 'no relation' ELSE 'other relations' END) AS relation,
           r.resource_manager || '/' || r.record_type AS kind,
           count(*), sum(r.record_length - r.fpi_length), sum(r.fpi_length)
      FROM records r LEFT JOIN firsts f USING (start_lsn)
     GROUP BY 1, 2
"""


@dataclass
class Part:
    relation: str
    kind: str  # resource manager / record type
    records: int
    bytes: int  # the records' own bytes, without their full-page images
    fpi_bytes: int  # the full-page images they carry (record_length counts both)


def breakdown(url: str, start_lsn: str, end_lsn: str) -> list[Part] | None:
    """The WAL between two LSNs by relation and record type, largest first; None if it is gone.

    On a connection of its own to `url` (a superuser's: pg_walinspect reads the server's files).
    """
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            rows: list[Any] = conn.execute(BREAKDOWN, [start_lsn, end_lsn, start_lsn, end_lsn]).fetchall()
    except psycopg.Error:
        return None
    parts = [Part(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]
    return sorted(parts, key=lambda p: -(p.bytes + p.fpi_bytes))


def grouped(parts: list[Part], by: str = "relation") -> list[tuple[str, int, int, int]]:
    """(relation or record kind, records, bytes, full-page image bytes), largest first."""
    totals: dict[str, list[int]] = {}
    for p in parts:
        t = totals.setdefault(getattr(p, by), [0, 0, 0])
        t[0] += p.records
        t[1] += p.bytes
        t[2] += p.fpi_bytes
    return sorted(((k, *v) for k, v in totals.items()), key=lambda r: -(r[2] + r[3]))  # type: ignore[misc]
