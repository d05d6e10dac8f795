"""Exceptions a handler raises to say what its failure means."""


class PermanentError(Exception):
    """The job can never succeed as submitted: bury it in DEAD now."""


class TransientError(Exception):
    """The job may succeed later: retry it with backoff while budget remains."""


class UnknownKind(LookupError):
    """No handler is registered for this kind."""


class LeaseLost(Exception):
    """The job's lease token no longer matches: another owner has the job."""
