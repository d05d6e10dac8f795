"""python manage.py reliableq_queue list | pause NAME [--until ISO] | resume NAME."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import rules, services, stats
from ...errors import InvalidJob


class Command(BaseCommand):
    help = "List queues with their pause state and unfinished work; pause or resume one (running jobs finish)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="list|pause|resume")
        actions.add_parser("list", help="Every queue with jobs or a pause state.")
        pause = actions.add_parser("pause", help="Stop claims from a queue; running jobs finish.")
        pause.add_argument("name")
        pause.add_argument(
            "--until", help="An ISO 8601 time with a UTC offset (2030-01-01T12:00:00Z); default: until resumed."
        )
        resume = actions.add_parser("resume", help="Let workers claim a queue's jobs again.")
        resume.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self.list()
            return
        name = options["name"]
        try:
            if action == "pause":
                until = options.get("until")
                services.pause(name, until=None if until is None else rules.aware_time(until, field="--until"))
            else:
                services.resume(name)
        except InvalidJob as exc:
            raise CommandError(str(exc)) from None
        (queue,) = stats.queue_summaries([name])
        if queue.paused:
            until_text = f" until {queue.paused_until.isoformat()}" if queue.paused_until else " until resumed"
            self.stdout.write(self.style.SUCCESS(f"Paused {name}{until_text}; {queue.running} running job(s) finish."))
        elif action == "pause":  # an --until already past: rules.run_at takes it as now
            self.stdout.write(self.style.WARNING(f"{name} is not paused: --until has passed."))
        else:
            self.stdout.write(self.style.SUCCESS(f"Resumed {name}: {queue.pending} pending job(s)."))

    def list(self) -> None:
        queues = stats.queue_summaries()
        if not queues:
            self.stdout.write("No queues: no jobs and no pause state.")
            return
        header = ("queue", "paused", "until", "pending", "running", "oldest due age")
        rows = [
            (
                q.name,
                "yes" if q.paused else "no",
                q.paused_until.isoformat() if q.paused_until else "-",
                str(q.pending),
                str(q.running),
                f"{q.oldest_due_age_seconds:.1f}s",
            )
            for q in queues
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write(
                "  ".join(
                    cell.ljust(w) if i < 3 else cell.rjust(w)
                    for i, (cell, w) in enumerate(zip(row, widths, strict=True))
                ).rstrip()
            )
