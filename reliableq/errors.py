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

    def __init__(self, job: Any, needed: str) -> None:
        self.job = job
        self.needed = needed
        super().__init__(f"Job {job.id} is {job.status}; this needs a {needed} job.")
