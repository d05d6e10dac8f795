"""Settings for the benchmark harness's processes only: testproject's, plus the peers' apps.

The harness points DATABASE_URL at its own embedded PostgreSQL (.pgdata/bench) before any
process loads these settings, so nothing here touches the tests' server. The peers are added
only when installed (`pip install -e ".[bench]"`), so the harness still runs without them.
"""

from __future__ import annotations

from importlib.util import find_spec

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS, TASKS

HAVE_PROCRASTINATE = find_spec("procrastinate") is not None
HAVE_TASKS_DB = find_spec("django_tasks_db") is not None

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
if HAVE_PROCRASTINATE:
    INSTALLED_APPS.append("procrastinate.contrib.django")
if HAVE_TASKS_DB:
    INSTALLED_APPS.append("django_tasks_db")
    # Django's tasks framework with its database backend, as a Django team would set it up.
    TASKS = {**TASKS, "dbpeer": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["bench"]}}
