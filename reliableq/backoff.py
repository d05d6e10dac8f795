"""Pure retry policy: capped exponential backoff with full jitter."""

from __future__ import annotations

import random
from typing import Protocol


class RandomSource(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


_system = random.SystemRandom()


def cap(attempt: int, *, base: float, maximum: float) -> float:
    """The ceiling of the delay after failed attempt `attempt` (1-based)."""
    if attempt < 1:
        raise ValueError("attempt numbers start at 1.")
    # min() first on the exponent so that a huge attempt number cannot overflow.
    exponent = min(attempt - 1, 64)
    return min(maximum, base * (2.0**exponent))


def delay(attempt: int, *, base: float, maximum: float, rng: RandomSource = _system) -> float:
    """Seconds to wait before the next attempt: Uniform(0, cap(attempt))."""
    return rng.uniform(0.0, cap(attempt, base=base, maximum=maximum))
