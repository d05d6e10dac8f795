"""What an attempt's result means for its job: retry with backoff, or DEAD."""

from __future__ import annotations

import pytest

from reliableq import backoff, policy
from reliableq.models import JobStatus, Outcome


class UpperBound:
    def uniform(self, a: float, b: float) -> float:
        return b


def test_success_finalizes_the_job() -> None:
    decision = policy.succeeded()
    assert (decision.status, decision.outcome, decision.delay) == (JobStatus.SUCCEEDED, Outcome.SUCCEEDED, 0.0)


def test_permanent_error_goes_dead_now_even_with_budget_left() -> None:
    decision = policy.failed(
        outcome=Outcome.FAILED_PERMANENT, attempt=1, max_attempts=5, base=5, maximum=3600, rng=UpperBound()
    )
    assert decision.status == JobStatus.DEAD
    assert decision.outcome == Outcome.FAILED_PERMANENT
    assert decision.delay == 0.0


@pytest.mark.parametrize("outcome", [Outcome.FAILED_TRANSIENT, Outcome.TIMED_OUT])
@pytest.mark.parametrize("attempt", [1, 2, 4])
def test_transient_failure_with_budget_left_retries_after_a_jittered_delay(outcome: str, attempt: int) -> None:
    decision = policy.failed(outcome=outcome, attempt=attempt, max_attempts=5, base=5, maximum=3600, rng=UpperBound())
    assert decision.status == JobStatus.PENDING
    assert decision.outcome == outcome
    assert decision.delay == backoff.cap(attempt, base=5, maximum=3600)


def test_retry_delay_uses_the_configured_base_and_max() -> None:
    decision = policy.failed(
        outcome=Outcome.FAILED_TRANSIENT, attempt=3, max_attempts=10, base=0.5, maximum=1.5, rng=UpperBound()
    )
    assert decision.delay == 1.5


def test_retry_delay_defaults_to_a_real_random_source_within_the_cap() -> None:
    delays = {
        policy.failed(outcome=Outcome.FAILED_TRANSIENT, attempt=2, max_attempts=5, base=5, maximum=3600).delay
        for _ in range(50)
    }
    assert all(0.0 <= d <= 10 for d in delays)
    assert len(delays) > 1


@pytest.mark.parametrize("outcome", [Outcome.FAILED_TRANSIENT, Outcome.TIMED_OUT, Outcome.FAILED_PERMANENT])
def test_last_attempt_goes_dead(outcome: str) -> None:
    decision = policy.failed(outcome=outcome, attempt=5, max_attempts=5, base=5, maximum=3600, rng=UpperBound())
    assert decision.status == JobStatus.DEAD
    assert decision.outcome == outcome
    assert decision.delay == 0.0


def test_attempt_past_the_budget_goes_dead() -> None:
    # A replay can lower nothing, but a budget lowered by hand must still bury, never retry.
    decision = policy.failed(
        outcome=Outcome.FAILED_TRANSIENT, attempt=7, max_attempts=5, base=5, maximum=3600, rng=UpperBound()
    )
    assert decision.status == JobStatus.DEAD
