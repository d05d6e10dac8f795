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
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("reliableq.signals")

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()


def send(signal: Signal, **fields: Any) -> None:
    """Send `signal` to every receiver, logging (not raising) what a receiver raises."""
    for receiver, answer in signal.send_robust(sender=signal, **fields):
        if isinstance(answer, Exception):
            logger.error("receiver %r of a ReliableQ signal raised %r", receiver, answer, exc_info=answer)
