"""python manage.py reliableq_queue list | pause NAME [--until ISO] | resume NAME | purge NAME."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import rules, services
from ...errors import InvalidJob
from ...queue import stats


class Command(BaseCommand):
    help = "List queues with their pause state and unfinished work; pause or resume one (running jobs finish)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="list|pause|resume")
        listing = actions.add_parser("list", help="Queues with jobs or a pause state, by name, a page at a time.")
        listing.add_argument("--after", default="", help="List the queues after this name (the next page).")
        listing.add_argument("--limit", type=int, default=stats.QUEUE_PAGE, help="Queues per page (default 100).")
        pause = actions.add_parser("pause", help="Stop claims from a queue; running jobs finish.")
        pause.add_argument("name")
        pause.add_argument(
            "--until", help="An ISO 8601 time with a UTC offset (2030-01-01T12:00:00Z); default: until resumed."
        )
        resume = actions.add_parser("resume", help="Let workers claim a queue's jobs again.")
        resume.add_argument("name")
        purge = actions.add_parser(
            "purge", help="Cancel (or --delete) every PENDING job of a queue; running jobs finish."
        )
        purge.add_argument("name")
        purge.add_argument("--delete", action="store_true", help="Delete the jobs (and their attempts) instead.")
        purge.add_argument("--dry-run", action="store_true", help="Count the jobs; change nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self.list(after=options["after"], limit=options["limit"])
            return
        name = options["name"]
        if action == "purge":
            self.purge(name, delete=options["delete"], dry_run=options["dry_run"])
            return
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

    def purge(self, name: str, *, delete: bool, dry_run: bool) -> None:
        verb = "delete" if delete else "cancel"
        try:
            if dry_run:
                n = services.purge(name, dry_run=True)
                self.stdout.write(f"Would {verb} {n} PENDING job(s) of queue {name}.")
                return
            total = 0

            def progress(done: int) -> None:
                nonlocal total
                total += done
                if done:
                    self.stdout.write(f"{'deleted' if delete else 'cancelled'} {total} so far")

            services.purge(name, delete=delete, progress=progress)
        except InvalidJob as exc:
            raise CommandError(str(exc)) from None
        done = "Deleted" if delete else "Cancelled"
        self.stdout.write(self.style.SUCCESS(f"{done} {total} PENDING job(s) of queue {name}; running jobs finish."))

    def list(self, *, after: str, limit: int) -> None:
        if not 1 <= limit <= stats.MAX_QUEUE_PAGE:
            raise CommandError(f"--limit must be from 1 to {stats.MAX_QUEUE_PAGE}.")
        queues, more = stats.queue_page(after=after, limit=limit)
        if not queues:
            self.stdout.write("No queues: no jobs and no pause state." if not after else f"No queues after {after}.")
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
        if more is not None:
            self.stdout.write(f"More queues: reliableq_queue list --after {more}")
