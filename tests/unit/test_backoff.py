"""Capped exponential backoff with full jitter: cap(n) = min(MAX, BASE * 2**(n-1)), delay ~ Uniform(0, cap)."""

from __future__ import annotations

import random

import pytest

from reliableq import backoff


class UpperBound:
    """A random source that always answers the top of the range it is asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return b


class LowerBound:
    def uniform(self, a: float, b: float) -> float:
        return a


@pytest.mark.parametrize("attempt", range(1, 20))
def test_cap_doubles_from_base_until_it_reaches_max(attempt: int) -> None:
    assert backoff.cap(attempt, base=5, maximum=3600) == min(3600, 5 * 2 ** (attempt - 1))


def test_cap_of_first_attempt_is_base() -> None:
    assert backoff.cap(1, base=0.25, maximum=10) == 0.25


def test_cap_stays_at_max_for_huge_attempt_numbers_without_overflow() -> None:
    for attempt in (65, 1_000, 10**6, 10**18, 2**100):
        assert backoff.cap(attempt, base=5, maximum=3600) == 3600
        assert backoff.delay(attempt, base=5, maximum=3600, rng=UpperBound()) == 3600


@pytest.mark.parametrize("attempt", [0, -1, -100])
def test_attempt_numbers_below_one_are_rejected(attempt: int) -> None:
    with pytest.raises(ValueError, match="start at 1"):
        backoff.cap(attempt, base=5, maximum=3600)
    with pytest.raises(ValueError, match="start at 1"):
        backoff.delay(attempt, base=5, maximum=3600, rng=UpperBound())


def test_delay_is_full_jitter_between_zero_and_the_cap() -> None:
    rng = UpperBound()
    assert backoff.delay(4, base=5, maximum=3600, rng=rng) == 40
    assert rng.calls == [(0.0, 40)]
    assert backoff.delay(4, base=5, maximum=3600, rng=LowerBound()) == 0.0


def test_delay_upper_bound_is_capped_at_max() -> None:
    rng = UpperBound()
    assert backoff.delay(30, base=5, maximum=60, rng=rng) == 60
    assert rng.calls == [(0.0, 60)]


def test_seeded_draws_stay_within_bounds_and_spread_over_the_whole_range() -> None:
    rng = random.Random(20240601)
    cap = backoff.cap(3, base=5, maximum=3600)  # 20 s
    draws = [backoff.delay(3, base=5, maximum=3600, rng=rng) for _ in range(5000)]
    assert all(0.0 <= d <= cap for d in draws)
    # Full jitter: the draws reach close to both ends, and average about half the cap.
    assert max(draws) > 0.99 * cap
    assert min(draws) < 0.01 * cap
    assert 0.45 * cap < sum(draws) / len(draws) < 0.55 * cap


def test_seeded_draws_at_the_cap_never_exceed_max() -> None:
    rng = random.Random(7)
    draws = [backoff.delay(50, base=5, maximum=3600, rng=rng) for _ in range(2000)]
    assert all(0.0 <= d <= 3600 for d in draws)
    assert max(draws) > 0.99 * 3600


def test_default_random_source_stays_within_bounds() -> None:
    draws = [backoff.delay(2, base=1, maximum=10) for _ in range(500)]
    assert all(0.0 <= d <= 2 for d in draws)
    assert len(set(draws)) > 1  # jittered, not a constant
