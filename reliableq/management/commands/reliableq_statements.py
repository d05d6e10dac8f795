"""python manage.py reliableq_statements [NAME ...]: the queue layer's statements, by name, with their text."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...queue import statements


class Command(BaseCommand):
    help = "Print the queue layer's statements (all, or those named), each under its name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", help="statements to print (default: all)")
        parser.add_argument("--names-only", action="store_true", help="print the names only")

    def handle(self, *args: Any, **options: Any) -> None:
        found = statements.index()
        wanted = options["names"] or list(found)
        unknown = [name for name in wanted if name not in found]
        if unknown:
            raise CommandError(f"No statement named {', '.join(unknown)}; run with --names-only to list them.")
        for name in wanted:
            self.stdout.write(name if options["names_only"] else f"-- {name}\n{found[name].strip()}\n")
