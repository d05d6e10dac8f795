"""The queue across a failover, with real PostgreSQL processes (failure window 9).

A primary and a streaming standby of their own (the embedded PostgreSQL 18's initdb,
pg_basebackup -R and pg_ctl promote: tests/failover/pair.py); gunicorn and two workers on both
hosts (`HOST`/`PORT` lists, target_session_attrs=read-write); HTTP submissions, workflows and
`enqueue` in committed transactions; threads, coroutines and child processes whose handlers
write through the ORM, and charges. The primary crashes (pg_ctl stop -m immediate) and the
standby is promoted GAP seconds later: meanwhile the only server up is read-only.

Timing is printed, never asserted: what is asserted cannot move with the machine's load.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import wait_until

from .pair import Pair
from .runner import DATA_DIR, FailoverRun, Outcome, utcnow

pytestmark = [pytest.mark.slow, pytest.mark.failover]

GAP = 2.0  # seconds between the crash and the promote
LEASE_SECONDS = 3.0
AFTER = 30  # jobs acknowledged over HTTP after the promote before the load stops


@pytest.fixture(scope="module")
def pair() -> Pair:
    pair = Pair(DATA_DIR, synchronous=True).start()
    yield pair  # type: ignore[misc]
    pair.stop()


def fail_over_under_load(pair: Pair, log_dir: Path, *, synchronous: bool, read_only: bool = False) -> Outcome:
    """With `read_only`, a worker (r1) and an API server also start on the standby alone, as clients of a
    DNS name that has not moved yet would: it is read-only until the promote."""
    pair.ensure_standby(synchronous=synchronous)
    run = FailoverRun(pair, lease_seconds=LEASE_SECONDS, log_dir=log_dir)
    try:
        run.start(read_only_clients=read_only)  # returns once the workers have finished jobs of the load
        if read_only:
            assert_read_only_is_not_yet(run)
        failover = run.fail_over(gap=GAP)
        wait_until(
            lambda: sum(at > failover.promoted_at for at, _ in run.http_acks) >= AFTER,
            timeout=90,
            what=f"{AFTER} submissions acknowledged after the promote",
        )
        if read_only:
            assert_promoted_is_read_write(run)
        outcome = run.finish(settle_seconds=120)
    finally:
        run.shutdown()
    print(outcome.summary())
    return outcome


def assert_read_only_is_not_yet(run: FailoverRun) -> None:
    """On a standby the API says 503, never 500: not ready, and a submission refused with Retry-After."""
    status, _, body = run.ask_read_only("GET", "/v1/ready")
    assert (status, "read-only" in body["detail"]) == (503, True), body
    status, headers, body = run.ask_read_only("POST", "/v1/jobs", {"kind": "demo.noop", "payload": {}})
    assert (status, headers.get("Retry-After")) == (503, "2"), body


def assert_promoted_is_read_write(run: FailoverRun) -> None:
    """Once its server is promoted, the API that started on the standby serves, with no restart."""

    def submitted() -> bool:
        status, _, body = run.ask_read_only("POST", "/v1/jobs", {"kind": "demo.noop", "payload": {}})
        if status == 202:
            run.http_acks.append((utcnow(), body["id"]))
        return status == 202

    wait_until(submitted, timeout=30, what="a 202 from the API that started on the standby")
    assert run.ask_read_only("GET", "/v1/ready")[0] == 200


def assert_the_queue_rode_it_out(outcome: Outcome) -> None:
    """What holds in both modes: nobody exited, nothing answered 500, every part said it once."""
    assert outcome.exited == [], f"exited: {outcome.exited}"
    assert outcome.answers[500] == 0, f"POST /v1/jobs answers: {dict(outcome.answers)}"
    assert outcome.answers[503] > 0, "no submission met the outage: the test proves nothing"
    assert outcome.report.violations == [], "\n".join(outcome.report.violations)
    assert outcome.unfinished == [], f"{len(outcome.unfinished)} job(s) never finished"
    (failover,) = outcome.failovers
    assert failover.first_claim_at is not None, "no job was claimed on the new primary"
    for name, log in outcome.logs.items():
        # Once per outage, not once per attempt (the reconnects in the gap were many).
        assert len(re.findall(r"the database is unavailable", log)) == 1, f"{name}:\n{log[-4000:]}"
        assert len(re.findall(r"the database is back after", log)) == 1, f"{name}:\n{log[-4000:]}"
        assert "database error, retrying" not in log and "listener lost its connection" not in log, name
        # Meanwhile its health file said so (and the loop kept it fresh: nothing to restart).
        assert failover.marked.get(name, "").startswith("reconnecting since "), (name, failover.marked)


def test_with_a_synchronous_standby_no_acknowledged_job_charge_or_finish_is_lost(pair: Pair, tmp_path: Path) -> None:
    outcome = fail_over_under_load(pair, tmp_path, synchronous=True, read_only=True)
    assert "r1" in outcome.logs, "the worker on the read-only standby did not run"
    assert_the_queue_rode_it_out(outcome)
    assert outcome.acked_jobs and outcome.acked_charges and outcome.acked_finishes
    assert outcome.missing_jobs == [], "acknowledged jobs missing on the new primary"
    assert outcome.missing_charges == [], "acknowledged charges missing on the new primary"
    assert outcome.lost_finishes == [], "committed finishes missing on the new primary"
    assert outcome.statuses.keys() <= {"SUCCEEDED"}, dict(outcome.statuses)


def test_with_an_asynchronous_standby_the_queue_carries_on_and_what_was_lost_is_counted(
    pair: Pair, tmp_path: Path
) -> None:
    outcome = fail_over_under_load(pair, tmp_path, synchronous=False)
    assert_the_queue_rode_it_out(outcome)
    # What the standby had not received is gone (counted in the summary above, and measured over
    # many failovers by `python -m tests.failover`); everything it has runs to its end.
    assert outcome.acked_jobs > len(outcome.missing_jobs)
