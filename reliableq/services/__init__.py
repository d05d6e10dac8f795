"""The writers and reads that the API, the admin and the commands share.

Split by concern: enqueueing (the rules of a new job and its INSERT), actions (an operator's
replay, cancel, pause, resume) and reads; retention (prune, purge) lives in reliableq.queue.prune.
Every name stays importable from here.
"""

from __future__ import annotations

from ..errors import InvalidJob, WrongStatus
from ..options import JobOptions
from ..queue.enqueue import CHANNEL
from ..queue.prune import PURGED, RETENTION_BATCH, RETENTION_BUDGET_SECONDS, Retained, prune, purge, retain
from ..queue.stats import paused_queues
from .actions import (
    CANCEL_REQUESTED,
    CANCELLED,
    PAUSED,
    REPLAYED,
    REPLAYED_FROM_THE_START,
    RESUMED,
    cancel,
    pause,
    replay,
    resume,
)
from .enqueueing import (
    BATCH_UNIQUE_KEY,
    NewJob,
    check_job,
    dedupe_scope,
    default_max_attempts,
    enqueue,
    enqueue_many,
    enqueue_on_commit,
    pending_bound,
    submit,
    submit_many,
    submitter_fair_key,
)
from .reads import has_work

__all__ = [
    "BATCH_UNIQUE_KEY",
    "CANCELLED",
    "CANCEL_REQUESTED",
    "CHANNEL",
    "PAUSED",
    "PURGED",
    "REPLAYED",
    "REPLAYED_FROM_THE_START",
    "RESUMED",
    "RETENTION_BATCH",
    "RETENTION_BUDGET_SECONDS",
    "InvalidJob",
    "JobOptions",
    "NewJob",
    "Retained",
    "WrongStatus",
    "cancel",
    "check_job",
    "dedupe_scope",
    "default_max_attempts",
    "enqueue",
    "enqueue_many",
    "enqueue_on_commit",
    "has_work",
    "pause",
    "paused_queues",
    "pending_bound",
    "prune",
    "purge",
    "replay",
    "resume",
    "retain",
    "submit",
    "submit_many",
    "submitter_fair_key",
]
