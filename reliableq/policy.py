"""Pure decisions about what an attempt's result means for its job."""

from __future__ import annotations

from dataclasses import dataclass

from . import backoff
from .models import JobStatus, Outcome


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    status: str  # the job's next status: SUCCEEDED, PENDING (retry) or DEAD
    outcome: str  # the attempt's outcome
    delay: float = 0.0  # seconds until the retry, added to the database's now()


_SUCCEEDED = Decision(status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)  # frozen: one serves every job


def succeeded() -> Decision:
    return _SUCCEEDED


def failed(
    *,
    outcome: str,
    attempt: int,
    max_attempts: int,
    base: float,
    maximum: float,
    rng: backoff.RandomSource | None = None,
) -> Decision:
    """Retry with jittered backoff while budget remains; bury a permanent error or a spent budget."""
    if outcome == Outcome.FAILED_PERMANENT or attempt >= max_attempts:
        return Decision(status=JobStatus.DEAD, outcome=outcome)
    kwargs = {"rng": rng} if rng is not None else {}
    return Decision(
        status=JobStatus.PENDING,
        outcome=outcome,
        delay=backoff.delay(attempt, base=base, maximum=maximum, **kwargs),
    )
