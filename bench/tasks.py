"""The peers' versions of the benchmark's jobs: the same no-op and the same 50 ms wait.

procrastinate finds this module through its Django integration (it imports each app's
tasks.py); Django's tasks framework finds these functions by their import path.
"""

from __future__ import annotations

import asyncio
import time
from importlib.util import find_spec

SLEEP_SECONDS = 0.05
QUEUE = "bench"

if find_spec("procrastinate") is not None:
    from procrastinate.contrib.django import app

    # Async tasks, procrastinate's recommended form: its worker runs sync tasks on asgiref's
    # thread pool (min(32, cores + 4) threads), which would cap the 50 ms job at 6 in flight here.
    @app.task(name="bench.noop", queue=QUEUE)
    async def proc_noop() -> None:
        """Nothing."""

    @app.task(name="bench.sleep", queue=QUEUE)
    async def proc_sleep() -> None:
        await asyncio.sleep(SLEEP_SECONDS)


if find_spec("django_tasks_db") is not None:
    try:
        from django.tasks import task
    except ImportError:  # Django 5.2: the backport
        from django_tasks import task  # type: ignore[no-redef]

    @task(backend="dbpeer", queue_name=QUEUE)
    def dt_noop() -> None:
        """Nothing."""

    @task(backend="dbpeer", queue_name=QUEUE)
    def dt_sleep() -> None:
        time.sleep(SLEEP_SECONDS)
