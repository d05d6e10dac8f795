"""python -m tests.failover.enqueuer SECONDS_BETWEEN: enqueue jobs in committed transactions, as an app does.

One job at a time, each in `transaction.atomic()`; once the block has committed it prints
`ok <job id>` (the acknowledgement the failover tests count). A database error rolls the block
back: the loop closes the connection and enqueues the same job again, with the same dedupe_key,
so a commit whose answer was lost is found again rather than doubled. SIGTERM stops it between
jobs.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

# Threads, a coroutine, a child process that writes through the ORM, and charges over HTTP.
KINDS = (
    ("demo.noop", {}),
    ("test.sleep", {"seconds": 0.5}),
    ("charge", {"currency": "EUR"}),
    ("test.async_sleep", {"seconds": 0.3}),
    ("test.isolated_echo", {"seconds": 0.2}),
)


def main(pause: float) -> None:
    import django

    django.setup()
    from django.db import DatabaseError, InterfaceError, connection, transaction

    import reliableq

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    rng = random.Random(os.getpid())
    while not stopping:
        kind, payload = rng.choice(KINDS)
        if kind == "charge":
            payload = {**payload, "amount": rng.randrange(100, 100_000)}
        key = f"failover:{uuid.uuid4()}"
        while True:
            try:
                with transaction.atomic():
                    job = reliableq.enqueue(kind, payload, dedupe_key=key)
                print(f"ok {job.id}", flush=True)
                break
            except (DatabaseError, InterfaceError) as exc:
                print(f"error {type(exc).__name__}: {str(exc).strip()[:200]}", flush=True)
                connection.close()
                time.sleep(0.1)
        time.sleep(pause)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.05)
