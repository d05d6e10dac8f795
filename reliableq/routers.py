"""QueueRouter: ReliableQ's tables on RELIABLEQ["DATABASE"] only, and only those there.

    DATABASE_ROUTERS = ["reliableq.routers.QueueRouter"]

The package's own queries need no router: they go through reliableq.queue.db and the models' manager.
The router decides what `migrate` creates where, and sends your own ORM code on the queue's
models (a `Job(...).save()`, a fixture) to the queue's database too.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, models

from .conf import queue_alias

APP_LABEL = "reliableq"


class QueueRouter:
    def db_for_read(self, model: type[models.Model], **hints: Any) -> str | None:
        return queue_alias() if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str | None:
        return queue_alias() if model._meta.app_label == APP_LABEL else None

    def allow_migrate(self, database: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        """The queue's tables on its database only; no other app's on it, unless that is the default database."""
        queue = queue_alias()
        if app_label == APP_LABEL:
            return database == queue
        if database == queue and queue != DEFAULT_DB_ALIAS:
            return False
        return None  # other apps elsewhere: for the project's other routers, or Django, to decide
