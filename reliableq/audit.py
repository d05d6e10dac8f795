"""The audit trail of who changed a job's fate: django.contrib.admin's LogEntry, from the admin and the API alike."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import apps

logger = logging.getLogger("reliableq.audit")


def record(user: Any, job: Any, message: str) -> None:
    """Log `message` against `job` as a change made by `user`, before the change commits.

    LogEntry lives where the admin's tables do (the routers' choice, usually default). With the
    queue there too, the entry is in the change's own transaction. With the queue on a database of
    its own (RELIABLEQ["DATABASE"]) it cannot be: the entry is written first, on its own database,
    so a failed entry stops the change, and a change never commits without its entry; but a change
    whose own commit then fails leaves an entry behind for a change that did not happen.

    Without django.contrib.admin installed there is no LogEntry table: the entry goes to the
    `reliableq.audit` logger instead.
    """
    logger.info("job=%s user=%s %s", job.pk, getattr(user, "pk", None), message)
    if not apps.is_installed("django.contrib.admin"):
        return
    from django.contrib.admin.models import CHANGE, LogEntry

    LogEntry.objects.log_actions(
        user_id=user.pk, queryset=[job], action_flag=CHANGE, change_message=message, single_object=True
    )
