"""python manage.py runworker: claim and run jobs until stopped."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, InterfaceError

from ... import rules
from ...conf import reliableq_settings
from ...queue import health, stats
from ...worker import Worker, WorkerConfig
from ...worker.loop import default_worker_id, freeze_startup_objects

logger = logging.getLogger("reliableq.worker")


def positive(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise ValueError
    return number


class Command(BaseCommand):
    help = "Run a ReliableQ worker: claim due jobs into free slots and run their handlers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=8, help="Handlers in flight at most (default 8).")
        parser.add_argument("--queues", default="default", help="Comma-separated queue names (default: default).")
        parser.add_argument(
            "--lease-seconds",
            type=float,
            default=None,
            help="Lease length in seconds (default RELIABLEQ['LEASE_SECONDS']).",
        )
        parser.add_argument(
            "--grace-seconds",
            type=float,
            default=30.0,
            help="On SIGTERM/SIGINT, how long to let running handlers finish (default 30).",
        )
        parser.add_argument("--worker-id", default=None, help="Name in logs and attempts (default host:pid).")
        parser.add_argument("--burst", action="store_true", help="Exit 0 once nothing is due or running.")
        parser.add_argument(
            "--health-file",
            type=Path,
            default=None,
            help="Touch this file after every loop pass without a database error (for liveness probes).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = self.config(options)
        missing = health.unmigrated()
        if missing:
            # Before the first claim: a worker without its tables would retry "relation does not exist" forever.
            raise CommandError(f"The queue's database is not ready: {missing}, then start the worker again.")
        self.configure_logging(options["verbosity"])
        self.warn_of_unused_queues(config.queues)
        worker = Worker(config)
        freeze_startup_objects()
        code = worker.run()
        if code:
            sys.exit(code)

    def config(self, options: dict[str, Any]) -> WorkerConfig:
        concurrency = options["concurrency"]
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1.")
        queues = tuple(q.strip() for q in options["queues"].split(",") if q.strip())
        if not queues:
            raise CommandError("--queues needs at least one queue name.")
        bad = [q for q in queues if not rules.QUEUE.fullmatch(q)]  # the rule enqueue applies: every servable name
        if bad:
            raise CommandError(f"Invalid queue name(s): {', '.join(bad)}. A queue is {rules.QUEUE_HELP}.")
        lease = options["lease_seconds"]
        lease = float(reliableq_settings.LEASE_SECONDS) if lease is None else lease
        if lease <= 0:
            raise CommandError("--lease-seconds must be positive.")
        grace = options["grace_seconds"]
        if grace < 0:
            raise CommandError("--grace-seconds cannot be negative.")
        health_file = options["health_file"]
        if health_file is not None and not health_file.parent.is_dir():
            # Caught now, not by a liveness probe that would restart the worker forever.
            raise CommandError(f"--health-file: no directory {health_file.parent} to write it in.")
        worker_id = options["worker_id"] or default_worker_id()
        if len(worker_id) > 200:
            raise CommandError("--worker-id is limited to 200 characters.")
        return WorkerConfig(
            queues=queues,
            concurrency=concurrency,
            lease_seconds=lease,
            grace_seconds=grace,
            poll_seconds=float(reliableq_settings.POLL_SECONDS),
            listen=bool(reliableq_settings.LISTEN_NOTIFY),
            schedule_seconds=float(reliableq_settings.SCHEDULE_SECONDS),
            retention_seconds=float(reliableq_settings.RETENTION_INTERVAL_SECONDS),
            worker_id=worker_id,
            burst=options["burst"],
            health_file=health_file,
        )

    def warn_of_unused_queues(self, queues: tuple[str, ...]) -> None:
        """Name each queue no job ever used (a typo in --queues sits idle otherwise), and the closest that did."""
        try:
            unused = stats.unused_queues(queues)
        except (DatabaseError, InterfaceError):
            return  # the worker waits for its database as it runs, and says so
        for name, close in unused.items():
            guess = f" The closest queues that have: {', '.join(repr(c) for c in close)}." if close else ""
            logger.warning(
                "queue %r has never held a job (none is kept): is its name in --queues right?%s", name, guess
            )

    def configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("reliableq")
        if logger.handlers or logging.getLogger().handlers:
            return  # the project configured logging; respect it
        handler: logging.Handler = logging.StreamHandler(self.stderr._out)  # type: ignore[call-overload]
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO if verbosity > 0 else logging.WARNING)
