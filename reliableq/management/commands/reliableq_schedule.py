"""python manage.py reliableq_schedule list | run NAME | enable NAME | disable NAME."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import cron, schedules
from ...errors import InvalidJob, UnknownKind, WrongStatus
from ...models import Schedule

PAGE = 100


class Command(BaseCommand):
    help = "List schedules with their last and next slots; run one now; enable or disable one."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="list|run|enable|disable")
        listing = actions.add_parser("list", help="Schedules by name, a page at a time.")
        listing.add_argument("--after", default="", help="List the schedules after this name (the next page).")
        listing.add_argument("--limit", type=int, default=PAGE, help=f"Schedules per page (default {PAGE}).")
        for name, what in (
            ("run", "Make one job of the schedule now (not a slot)."),
            ("enable", "Make jobs again, from the next slot after now."),
            ("disable", "Make no job for any slot from now on."),
        ):
            actions.add_parser(name, help=what).add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self.list(after=options["after"], limit=options["limit"])
            return
        name = options["name"]
        try:
            if action == "run":
                job = schedules.run_now(name)
                self.stdout.write(self.style.SUCCESS(f"Made job {job.id} of schedule {name} ({job.kind})."))
                return
            done = schedules.set_enabled(name, action == "enable")
        except Schedule.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        except (WrongStatus, UnknownKind, InvalidJob) as exc:
            raise CommandError(str(exc)) from None
        if done.enabled:
            self.stdout.write(self.style.SUCCESS(f"Enabled {name}; next slot {_when(done.next_slot, done.timezone)}."))
        else:
            self.stdout.write(self.style.SUCCESS(f"Disabled {name}: no job for any slot from now on."))

    def list(self, *, after: str, limit: int) -> None:
        if not 1 <= limit <= 1000:
            raise CommandError("--limit must be from 1 to 1000.")
        found, more = schedules.page(after=after, limit=limit)
        if not found:
            self.stdout.write("No schedules." if not after else f"No schedules after {after}.")
            return
        header = ("name", "kind", "cron", "timezone", "enabled", "last slot", "next slot")
        rows = [
            (
                s.name,
                s.kind,
                s.cron,
                s.timezone,
                "yes" if s.enabled else "no",
                _when(s.last_slot, s.timezone),
                _when(s.next_slot, s.timezone),
            )
            for s in found
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if more is not None:
            self.stdout.write(f"More schedules: reliableq_schedule list --after {more}")


def _when(moment: Any, zone: str) -> str:
    """A slot as the schedule's zone reads it, which is how its cron is written."""
    if moment is None:
        return "-"
    try:
        return str(moment.astimezone(cron.zone(zone)).isoformat())
    except ValueError:
        return str(moment.isoformat())
