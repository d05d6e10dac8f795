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
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

# Threads, a coroutine, a child process that writes through the ORM, charges over HTTP, a job that sleeps
# between two steps and one that waits for an event this loop emits a few jobs later.
KINDS = (
    ("demo.noop", {}),
    ("test.sleep", {"seconds": 0.5}),
    ("charge", {"currency": "EUR"}),
    ("test.async_sleep", {"seconds": 0.3}),
    ("test.isolated_echo", {"seconds": 0.2}),
    ("steps.sleeper", {"sleep": 0.5}),
    ("steps.waiter", {}),
)
EMIT_AFTER = 3  # jobs enqueued between a waiter and the emit of its event


def main(pause: float) -> None:
    import django

    django.setup()
    from django.db import DatabaseError, InterfaceError, connection, transaction

    import reliableq

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    rng = random.Random(os.getpid())

    def committed(write: Any) -> Any:
        """`write()` in a transaction, again on a new connection until one commits (each write is
        idempotent: an enqueue by its dedupe_key, an emit by its name)."""
        while True:
            try:
                with transaction.atomic():
                    return write()
            except (DatabaseError, InterfaceError) as exc:
                print(f"error {type(exc).__name__}: {str(exc).strip()[:200]}", flush=True)
                connection.close()
                time.sleep(0.1)

    waiting: list[tuple[int, str]] = []  # (jobs enqueued when its waiter was, event name) not yet emitted
    emitted: list[str] = []
    enqueued = 0
    while not stopping:
        kind, payload = rng.choice(KINDS)
        if kind == "charge":
            payload = {**payload, "amount": rng.randrange(100, 100_000)}
        if kind == "steps.waiter":
            payload = {"event": f"failover-event:{uuid.uuid4()}"}
            waiting.append((enqueued, payload["event"]))
        key = f"failover:{uuid.uuid4()}"
        job = committed(lambda kind=kind, payload=payload, key=key: reliableq.enqueue(kind, payload, dedupe_key=key))
        print(f"ok {job.id}", flush=True)
        enqueued += 1
        while waiting and enqueued - waiting[0][0] > EMIT_AFTER:
            _, name = waiting.pop(0)
            committed(lambda name=name: reliableq.emit(name, {"from": "failover"}))
            emitted.append(name)
        time.sleep(pause)
    # No waiter is left waiting for an event that never comes: every event once more (an emit is
    # recorded once; an asynchronous standby may have lost one whose commit was acknowledged).
    for name in emitted + [name for _, name in waiting]:
        committed(lambda name=name: reliableq.emit(name, {"from": "failover"}))


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.05)
