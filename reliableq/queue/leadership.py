"""A fleet-wide duty held by one worker at a time, under an expiring lease fenced by a token.

The holder renews before its lease runs out; a renewal keeps its token only while the lease
is still its own and unexpired, so a holder that was paused past its lease finds the duty
taken (or its token changed) and stops. Time comes from the database.
"""

from __future__ import annotations

import uuid

from ..models import Leader
from . import db

LEADER = Leader._meta.db_table


_LEAD_SQL = f"""
            INSERT INTO {LEADER} (name, holder, token, expires_at)
            VALUES (%s, %s, gen_random_uuid(), statement_timestamp() + make_interval(secs => %s))
            ON CONFLICT (name) DO UPDATE
               SET holder = EXCLUDED.holder,
                   token = CASE WHEN {LEADER}.token = %s AND {LEADER}.expires_at > statement_timestamp()
                                THEN {LEADER}.token ELSE EXCLUDED.token END,
                   expires_at = EXCLUDED.expires_at
             WHERE ({LEADER}.holder = EXCLUDED.holder AND {LEADER}.token = %s
                    AND {LEADER}.expires_at > statement_timestamp())
                OR {LEADER}.expires_at <= statement_timestamp()
            RETURNING token
            """


def lead(name: str, *, holder: str, seconds: float, token: uuid.UUID | None) -> uuid.UUID | None:
    """Take or keep the duty `name` for `seconds`; the token it is held under now, or None.

    `token` is the one the caller holds (None if it holds none): a renewal with the current
    token extends the lease; a free or expired duty is taken under a new token; anything else
    (another holder's unexpired lease, a stale token) leaves the row alone and answers None.
    """
    with db.cursor() as cursor:
        cursor.execute(
            _LEAD_SQL,
            [name, holder, float(seconds), token, token],
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


_RESIGN_SQL = f"DELETE FROM {LEADER} WHERE name = %s AND token = %s"


def resign(name: str, *, token: uuid.UUID) -> bool:
    """Give the duty up at once (a worker shutting down), if it is still held under `token`."""
    with db.cursor() as cursor:
        cursor.execute(_RESIGN_SQL, [name, token])
        return bool(cursor.rowcount == 1)
