"""Job ids: UUIDs that start with the time they were made (version 7, RFC 9562).

A random (version 4) id sends each new job's primary-key entry to a random leaf of the index, and
each of a job's three row versions enters it again there: over a long run every leaf is touched
between two checkpoints, and the first touch of each writes the whole 8 kB page to the WAL. An id
that starts with the millisecond keeps a job's entries at the index's right edge, among pages that
are already hot. Ids made in one millisecond are in random order: the time prefix is for locality,
not a promise of order (the job list orders by created_at), except where after() makes them.
"""

from __future__ import annotations

import os
import time
import uuid

_MS = (1 << 48) - 1
_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62


def job_id() -> uuid.UUID:
    """A version 7 UUID: 48 bits of Unix milliseconds, then 74 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits: 12 for rand_a, 62 for rand_b, 6 left over
    rand_a = rand >> 68
    rand_b = rand & ((1 << 62) - 1)
    return uuid.UUID(int=(ms & _MS) << 80 | _VERSION | rand_a << 64 | _VARIANT | rand_b)


_RAND_B = (1 << 62) - 1


def after(previous: uuid.UUID | None) -> uuid.UUID:
    """A version 7 UUID greater than `previous` (a workflow's members, listed in id order, keep the
    order they were added in): a new one, or `previous` plus one when the clock has not moved on."""
    made = job_id()
    if previous is None or made > previous:
        return made
    if (previous.int & _RAND_B) != _RAND_B:  # the random bits' room: plus one stays a version 7 UUID
        return uuid.UUID(int=previous.int + 1)
    while made <= previous:  # 2**62 ids in one millisecond used up: wait for the next
        made = job_id()
    return made
