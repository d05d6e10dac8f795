"""python manage.py prunejobs --older-than 7d: delete finished jobs and their attempts."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import services
from ...models import FINISHED

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
# now() minus anything much older leaves PostgreSQL's timestamp range (or timedelta's) and fails.
MAX_AGE = dt.timedelta(days=36500)


def parse_age(text: str) -> dt.timedelta:
    match = AGE.fullmatch(text.strip())
    if not match:
        raise CommandError(f"--older-than takes a number and a unit (s, m, h, d, w), like 7d or 12h; got {text!r}.")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if seconds > MAX_AGE.total_seconds():
        raise CommandError(f"--older-than is at most {MAX_AGE.days}d (100 years); got {text!r}.")
    return dt.timedelta(seconds=seconds)


class Command(BaseCommand):
    help = (
        "Delete finished jobs (SUCCEEDED, DEAD, CANCELLED, or those named by --status) with their attempts, "
        "finished longer ago than --older-than. --dry-run says how many, and deletes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", required=True, help="Age such as 7d, 12h, 30m.")
        parser.add_argument(
            "--status",
            default=",".join(FINISHED),
            help=f"Comma-separated finished statuses to delete (default {','.join(FINISHED)}).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; delete nothing.")
        parser.add_argument("--batch-size", type=int, default=1000, help="Jobs deleted per transaction.")

    def handle(self, *args: Any, **options: Any) -> None:
        age = parse_age(options["older_than"])
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.")
        statuses = parse_statuses(options["status"])
        named = ",".join(statuses)
        if options["dry_run"]:
            n = services.prune(older_than=age, statuses=statuses, dry_run=True)
            self.stdout.write(f"Would delete {n} {named} job(s) older than {options['older_than']}; deleted nothing.")
            return
        total = 0

        def progress(deleted: int) -> None:
            nonlocal total
            total += deleted
            if options["verbosity"] > 0 and deleted:
                self.stdout.write(f"deleted {total} finished job(s) so far")

        services.prune(older_than=age, batch_size=options["batch_size"], progress=progress, statuses=statuses)
        which = "finished" if set(statuses) == set(FINISHED) else named
        self.stdout.write(self.style.SUCCESS(f"Deleted {total} {which} job(s) older than {options['older_than']}."))


def parse_statuses(text: str) -> list[str]:
    names = [name.strip().upper() for name in text.split(",") if name.strip()]
    wrong = [name for name in names if name not in FINISHED]
    if not names or wrong:
        raise CommandError(
            f"--status takes finished statuses, comma-separated ({', '.join(FINISHED)}); "
            f"got {', '.join(wrong) or 'none'}. Unfinished jobs of a queue: reliableq_queue purge."
        )
    return list(dict.fromkeys(names))
