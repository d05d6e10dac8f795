"""python -m tests.chaos.emitter: the chaos driver's emits, through reliableq.emit, as an application does.

Reads a JSON list of {"name", "payload", "rollback"} on stdin. Each emit runs in a transaction of
its own: a `rollback` one raises inside the block (it must wake nothing); the others are retried on
a new connection until one commits (an emit is recorded once per name, so a commit whose answer was
lost is found again, waking nothing). Prints one JSON line per emit that committed or rolled back:
the jobs it woke, whether it made the event, and the database's clock once the commit had returned
(every attempt that starts later must see the event).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

DEADLINE_SECONDS = 120.0  # a failover and a restart in a row take well under this


class RolledBack(Exception):
    pass


def main() -> None:
    import django

    django.setup()
    from django.db import DatabaseError, InterfaceError, connection, transaction

    import reliableq

    for emit in json.load(sys.stdin):
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            try:
                event = None
                try:
                    with transaction.atomic():
                        event = reliableq.emit(emit["name"], emit["payload"])
                        if emit.get("rollback"):
                            raise RolledBack
                except RolledBack:
                    pass
                with connection.cursor() as cursor:
                    cursor.execute("SELECT clock_timestamp()")
                    (acked,) = cursor.fetchone()
                break
            except (DatabaseError, InterfaceError) as exc:
                if time.monotonic() > deadline:
                    raise
                print(f"retry {type(exc).__name__}", file=sys.stderr, flush=True)
                connection.close()
                time.sleep(0.2)
        answer: dict[str, Any] = {
            "name": emit["name"],
            "rollback": bool(emit.get("rollback")),
            "woken": getattr(event, "woken", 0),
            "made": bool(getattr(event, "made", False)),
            "acked": acked.isoformat(),
        }
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
