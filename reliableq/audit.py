"""The audit trail of who changed a job's fate: django.contrib.admin's LogEntry, from the admin and the API alike."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import apps

logger = logging.getLogger("reliableq.audit")


def record(user: Any, job: Any, message: str) -> None:
    """Log `message` against `job` as a change made by `user`, in the caller's transaction.

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
