"""Job ids are version 7 UUIDs: the creation millisecond first, then random bits."""

from __future__ import annotations

import time
import uuid

from reliableq import ids


def test_a_job_id_is_a_version_7_rfc_uuid() -> None:
    made = ids.job_id()

    assert made.version == 7
    assert made.variant == uuid.RFC_4122


def test_a_job_id_starts_with_the_millisecond_it_was_made() -> None:
    before = time.time_ns() // 1_000_000
    made = ids.job_id()
    after = time.time_ns() // 1_000_000

    assert before <= made.int >> 80 <= after


def test_ids_of_later_milliseconds_sort_after_earlier_ones() -> None:
    first = ids.job_id()
    deadline = time.monotonic() + 1
    while time.time_ns() // 1_000_000 == first.int >> 80:  # the next millisecond, polled
        assert time.monotonic() < deadline
    second = ids.job_id()

    assert str(first) < str(second)  # as text too: the uuid type and its text sort alike
    assert first.int < second.int


def test_ids_made_in_one_burst_are_distinct() -> None:
    made = {ids.job_id() for _ in range(10_000)}

    assert len(made) == 10_000


def test_after_makes_ids_that_sort_in_the_order_they_were_made() -> None:
    made = [ids.after(None)]
    for _ in range(2_000):  # many in one millisecond: random order there without after()
        made.append(ids.after(made[-1]))
    assert made == sorted(made) and len(set(made)) == len(made)
    ahead = uuid.UUID(int=(made[-1].int >> 80) + 60_000 << 80 | 0x7 << 76 | 0b10 << 62)  # a minute ahead
    following = ids.after(ahead)  # a clock that went back still gives a later id, one of version 7
    assert following > ahead and following.version == 7 and following.variant == uuid.RFC_4122
