"""The invariant checks can fail: each one is shown a database that breaks it."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest

from .invariants import check

pytestmark = pytest.mark.django_db(transaction=True)


def job(
    conn: psycopg.Connection[Any],
    *,
    status: str,
    attempts: int,
    max_attempts: int = 5,
    kind: str = "demo.noop",
    payload: str = "{}",
    last_error: str = "",
    token: uuid.UUID | None = None,
    key: str | None = None,
    snoozes: int = 0,
    cancel_requested: bool = False,
) -> uuid.UUID:
    job_id = uuid.uuid4()
    conn.execute(
        "INSERT INTO reliableq_job (id, kind, queue, priority, payload, status, attempts, max_attempts, run_at,"
        " worker_id, last_error, lease_token, lease_expires_at, concurrency_key, snoozes, cancel_requested_at,"
        " created_at, updated_at)"
        " VALUES (%s, %s, 'default', 0, %s::jsonb, %s, %s, %s, now(), 'w1', %s, %s,"
        " CASE WHEN %s::uuid IS NULL THEN NULL ELSE now() END, %s, %s, CASE WHEN %s THEN now() END, now(), now())",
        (job_id, kind, payload, status, attempts, max_attempts, last_error, token, token, key, snoozes,
         cancel_requested),
    )  # fmt: skip
    return job_id


def attempt(
    conn: psycopg.Connection[Any],
    job_id: uuid.UUID,
    number: int,
    outcome: str,
    *,
    worker: str = "w1",
    start: float = 0,
    end: float | None = 1,
) -> None:
    conn.execute(
        "INSERT INTO reliableq_attempt"
        " (job_id, number, worker_id, lease_token, started_at, finished_at, outcome, error)"
        " VALUES (%s, %s, %s, gen_random_uuid(), '2030-01-01'::timestamptz + make_interval(secs => %s),"
        " CASE WHEN %s::float8 IS NULL THEN NULL"
        " ELSE '2030-01-01'::timestamptz + make_interval(secs => %s) END, %s, '')",
        (job_id, number, worker, start, end, end, outcome),
    )


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def names(conn: psycopg.Connection[Any], concurrency: int = 4) -> set[str]:
    return check(conn, concurrency=concurrency).names


def test_a_clean_history_passes(conn: psycopg.Connection[Any]) -> None:
    done = job(conn, status="SUCCEEDED", attempts=2)
    attempt(conn, done, 1, "LEASE_EXPIRED", start=0, end=2)
    attempt(conn, done, 2, "SUCCEEDED", worker="w2", start=3, end=4)
    dead = job(conn, status="DEAD", attempts=1, last_error="boom")
    attempt(conn, dead, 1, "FAILED_PERMANENT")
    assert check(conn, concurrency=4).violations == []


def test_a_stuck_job_is_reported(conn: psycopg.Connection[Any]) -> None:
    job(conn, status="PENDING", attempts=0)
    assert "terminal" in names(conn)


def test_a_finalization_by_a_stale_token_is_reported(conn: psycopg.Connection[Any]) -> None:
    stale = job(conn, status="SUCCEEDED", attempts=2)
    attempt(conn, stale, 1, "SUCCEEDED")  # the old owner "won"
    attempt(conn, stale, 2, "LEASE_LOST", start=2, end=3)
    assert "final_state_by_last_token" in names(conn)


def test_attempts_over_budget_or_missing_are_reported(conn: psycopg.Connection[Any]) -> None:
    over = job(conn, status="DEAD", attempts=3, max_attempts=2, last_error="x")
    for n in (1, 2, 3):
        attempt(conn, over, n, "FAILED_TRANSIENT", start=n * 2, end=n * 2 + 1)
    missing = job(conn, status="DEAD", attempts=2, max_attempts=2, last_error="x")
    attempt(conn, missing, 2, "FAILED_TRANSIENT")
    assert "budget_and_history" in names(conn)


def test_a_dead_job_without_an_error_is_reported(conn: psycopg.Connection[Any]) -> None:
    dead = job(conn, status="DEAD", attempts=1)
    attempt(conn, dead, 1, "FAILED_PERMANENT")
    assert "dead_has_error" in names(conn)


def test_a_succeeded_charge_job_without_its_charge_is_reported(conn: psycopg.Connection[Any]) -> None:
    charged = job(conn, status="SUCCEEDED", attempts=1, kind="charge", payload='{"amount": 5, "currency": "EUR"}')
    attempt(conn, charged, 1, "SUCCEEDED")
    assert "succeeded_charge_committed_once" in names(conn)


def test_more_handlers_in_flight_than_slots_is_reported(conn: psycopg.Connection[Any]) -> None:
    for i in range(3):
        overlapping = job(conn, status="SUCCEEDED", attempts=1)
        attempt(conn, overlapping, 1, "SUCCEEDED", start=i * 0.1, end=10)
    assert "in_flight_within_concurrency" in names(conn, concurrency=2)
    assert "in_flight_within_concurrency" not in names(conn, concurrency=3)


def test_an_open_attempt_or_a_left_lease_is_reported(conn: psycopg.Connection[Any]) -> None:
    held = job(conn, status="RUNNING", attempts=1, token=uuid.uuid4())
    attempt(conn, held, 1, "RUNNING", end=None)
    found = names(conn)
    assert {"attempts_closed", "no_lease_left"} <= found


def test_more_than_the_per_key_limit_running_at_once_is_reported(conn: psycopg.Connection[Any]) -> None:
    for i in range(3):
        same_key = job(conn, status="SUCCEEDED", attempts=1, kind="test.per_key", key="k1")
        attempt(conn, same_key, 1, "SUCCEEDED", worker=f"w{i}", start=i * 0.1, end=5)
    assert "per_key_within_limit" in names(conn)


def test_two_keys_at_their_limit_pass(conn: psycopg.Connection[Any]) -> None:
    for i in range(4):
        keyed = job(conn, status="SUCCEEDED", attempts=1, kind="test.per_key", key=f"k{i % 2}")
        attempt(conn, keyed, 1, "SUCCEEDED", worker=f"w{i}", start=i * 0.1, end=5)
    assert "per_key_within_limit" not in names(conn)


def test_eleven_starts_in_one_second_of_a_10_per_second_kind_are_reported(conn: psycopg.Connection[Any]) -> None:
    for i in range(11):
        rated = job(conn, status="SUCCEEDED", attempts=1, kind="test.rated")
        attempt(conn, rated, 1, "SUCCEEDED", worker=f"w{i}", start=i * 0.09, end=i * 0.09 + 0.01)
    assert "rate_within_limit" in names(conn, concurrency=20)


def test_a_snooze_that_spent_an_attempt_is_reported(conn: psycopg.Connection[Any]) -> None:
    snoozed = job(conn, status="SUCCEEDED", attempts=2, max_attempts=1, kind="test.snooze", payload='{"budget": 1}')
    attempt(conn, snoozed, 1, "SNOOZED")
    attempt(conn, snoozed, 2, "SUCCEEDED", start=2, end=3)
    assert "snooze_spends_no_attempt" in names(conn)  # snoozes = 0: the budget grew without a snooze counted


def test_a_cancel_nobody_asked_for_is_reported(conn: psycopg.Connection[Any]) -> None:
    cancelled = job(conn, status="CANCELLED", attempts=1, kind="test.cancellable")
    attempt(conn, cancelled, 1, "CANCELLED")
    assert {"terminal", "cancelled_on_request"} <= names(conn)
    asked = job(conn, status="CANCELLED", attempts=1, kind="test.cancellable", cancel_requested=True)
    attempt(conn, asked, 1, "CANCELLED", start=2, end=3)
    assert not [v for v in check(conn, concurrency=4).violations if str(asked) in v]


def test_a_start_inside_a_pause_is_reported(conn: psycopg.Connection[Any]) -> None:
    started = job(conn, status="SUCCEEDED", attempts=1)
    attempt(conn, started, 1, "SUCCEEDED", start=5, end=6)
    (base,) = conn.execute("SELECT '2030-01-01'::timestamptz").fetchone()  # type: ignore[misc]
    inside = [(base + dt.timedelta(seconds=4), base + dt.timedelta(seconds=7))]
    outside = [(base + dt.timedelta(seconds=6), base + dt.timedelta(seconds=9))]
    assert "no_claim_while_paused" in check(conn, concurrency=4, pauses=inside).names
    assert "no_claim_while_paused" not in check(conn, concurrency=4, pauses=outside).names


def test_an_isolated_lease_that_expired_while_its_worker_lived_is_reported(conn: psycopg.Connection[Any]) -> None:
    """A child's death must fail only its own attempt: an expired lease of an isolated kind needs its worker
    killed, crashed or stopped, or the database failing, while it ran."""
    expired = job(conn, status="SUCCEEDED", attempts=2, kind="chaos.isolated_flaky")
    attempt(conn, expired, 1, "LEASE_EXPIRED", worker="w2", start=5, end=8)
    attempt(conn, expired, 2, "SUCCEEDED", worker="w3", start=9, end=10)
    (base,) = conn.execute("SELECT '2030-01-01'::timestamptz").fetchone()  # type: ignore[misc]

    assert "isolated_lease_outlives_a_dead_child" in check(conn, concurrency=4).names
    assert "isolated_lease_outlives_a_dead_child" not in check(conn, concurrency=4, interrupted={"w2"}).names
    during = [base + dt.timedelta(seconds=6)]
    assert "isolated_lease_outlives_a_dead_child" not in check(conn, concurrency=4, outages=during).names
    after = [base + dt.timedelta(seconds=20)]
    assert "isolated_lease_outlives_a_dead_child" in check(conn, concurrency=4, outages=after).names


def test_a_fair_key_served_only_after_the_flood_is_reported(conn: psycopg.Connection[Any]) -> None:
    """FIFO over a flood: one worker's claims, one after another, take the flood's six before the
    small key's three, whose turns came first: nothing overlapped them to hold those turns."""

    def started(key: str, turn: float, at: float) -> None:
        fair = job(conn, status="SUCCEEDED", attempts=1, kind="test.fair")
        conn.execute("UPDATE reliableq_job SET fair_key = %s, fair_seq = %s WHERE id = %s", (key, turn, fair))
        attempt(conn, fair, 1, "SUCCEEDED", worker="w1", start=at, end=at + 0.1)

    for n in range(6):
        started("flood", n, n)
    for n in range(3):
        started("small", n + 0.5, 6 + n)
    assert "fair_turns" in names(conn, concurrency=20)
    conn.execute("TRUNCATE reliableq_job CASCADE")
    for n in range(3):  # the same jobs in turn order: flood, small, flood, small...
        started("flood", n, 2 * n)
        started("small", n + 0.5, 2 * n + 1)
    assert "fair_turns" not in names(conn, concurrency=20)


def test_an_acknowledged_job_missing_is_reported(conn: psycopg.Connection[Any]) -> None:
    kept = job(conn, status="SUCCEEDED", attempts=1)
    attempt(conn, kept, 1, "SUCCEEDED")
    lost = uuid.uuid4()  # a 202 was answered for it, and the new primary never had it
    assert "acknowledged_present" in check(conn, concurrency=4, acknowledged=[kept, lost]).names
    assert check(conn, concurrency=4, acknowledged=[kept]).violations == []
