"""The package's exceptions: one family under ReliableQError.

Handlers raise PermanentError or TransientError to say what a failure means; callers catch
InvalidJob for input the rules refuse and UnknownKind for a kind no app registered.
"""

from __future__ import annotations

from typing import Any


class ReliableQError(Exception):
    """Base of every exception ReliableQ raises or asks handlers to raise."""


class PermanentError(ReliableQError):
    """The job can never succeed as submitted: bury it in DEAD now."""


class TransientError(ReliableQError):
    """The job may succeed later: retry it with backoff while budget remains."""


class Snooze(ReliableQError):
    """Not now: put the job back to PENDING in `seconds`, spending no attempt (outcome SNOOZED).

    The attempt is given back by adding one to the job's max_attempts, so its budget for
    failures is unchanged. After RELIABLEQ["MAX_SNOOZES"] snoozes a Snooze counts as a failure.
    """

    def __init__(self, seconds: float) -> None:
        try:
            seconds = float(seconds)
        except (TypeError, ValueError):
            raise TypeError("Snooze takes a number of seconds.") from None
        if not 0 <= seconds <= 366 * 86400:
            raise ValueError("Snooze seconds must be between 0 and a year.")
        self.seconds = seconds
        super().__init__(f"snoozed for {seconds:g}s")


class Cancelled(ReliableQError):
    """The handler stopped because it was asked to (job.cancel_requested): the job ends CANCELLED."""

    def __init__(self, message: str = "cancelled on request") -> None:
        super().__init__(message)


class UnknownKind(ReliableQError, LookupError):
    """No handler is registered for this kind."""


class InvalidJob(ReliableQError, ValueError):
    """The job as asked for breaks a rule (queue name, sizes, storable payload, nesting, time bounds)."""

    def __init__(self, message: str, *, field: str = "non_field_errors") -> None:
        self.field = field  # which part of a submission is wrong, for the API's per-field errors
        super().__init__(message)


class NotSubmittable(ReliableQError):
    """This kind may not be submitted over HTTP (unknown, not http=True, or a Tasks kind)."""


class WrongStatus(ReliableQError):
    """The job is not in the status this operation needs."""

    def __init__(self, job: Any, needed: str, message: str | None = None) -> None:
        self.job = job
        self.needed = needed
        super().__init__(message or f"Job {job.id} is {job.status}; this needs a {needed} job.")


class TooManyUnfinished(ReliableQError):
    """The submitter already holds RELIABLEQ["MAX_PENDING_PER_SUBMITTER"] unfinished jobs (the API answers 429)."""

    def __init__(self, held: int, limit: int, adding: int = 1) -> None:
        self.held = held
        self.limit = limit
        super().__init__(
            f"You hold {held} unfinished job(s); adding {adding} would pass the limit of {limit} "
            "(MAX_PENDING_PER_SUBMITTER). Submit more once some have finished."
        )


class KeyConflict(ReliableQError):
    """An Idempotency-Key was used before with another body (the API answers 409)."""


class WaitTimeout(ReliableQError):
    """Raised in a handler by job.wait_for(name, timeout=...) when its event was not emitted in time."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"event {name!r} was not emitted before the wait's timeout")
