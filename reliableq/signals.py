"""Django signals of a job's journey, for Sentry, audit logs or metrics without wrapping handlers.

- job_enqueued(job_id, kind, queue): sent once the job is committed, in the enqueuing process.
- job_started(job_id, kind, attempt, worker_id): sent in the process that runs the attempt (the
  worker, or its child under isolation="process"), just before the handler is called.
- job_finished(job_id, kind, status, outcome, attempt, seconds): sent by the worker once the
  attempt's end has committed; `status` is the job's after it (PENDING for a retry or a snooze),
  `seconds` the handler's run time.

Receivers run in the sending thread (job_finished: the worker's loop, between its claims), so keep
them quick; one that raises is logged and does not stop the others or the worker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("reliableq.signals")

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()

# The package's own reactions to written ends (the Tasks backend's task_finished), called once per
# batch with its (job id, kind, status): a signal's dispatch per job costs more than a no-op job's
# own work, and most batches hold no job these care about.
Ended = Sequence[tuple[uuid.UUID, str, str]]
_batch_hooks: list[Callable[[Ended], None]] = []


def on_ended(hook: Callable[[Ended], None]) -> Callable[[Ended], None]:
    """Register `hook` for every written batch of ends (internal; apps use job_finished)."""
    if hook not in _batch_hooks:
        _batch_hooks.append(hook)
    return hook


def ended_hooks() -> bool:
    return bool(_batch_hooks)


def send_ended(ended: Ended) -> None:
    """Call every batch hook with these ends, logging (not raising) what a hook raises."""
    for hook in _batch_hooks:
        try:
            hook(ended)
        except Exception:
            logger.exception("a ReliableQ hook on written ends (%r) raised", hook)


def send(signal: Signal, **fields: Any) -> None:
    """Send `signal` to every receiver, logging (not raising) what a receiver raises."""
    for receiver, answer in signal.send_robust(sender=signal, **fields):
        if isinstance(answer, Exception):
            logger.error("receiver %r of a ReliableQ signal raised %r", receiver, answer, exc_info=answer)
