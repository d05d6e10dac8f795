"""One of many processes enqueueing one debounced key at once (tests/integration/test_debounce.py).

Sets Django up, opens its connection, says "ready" and waits for "go" on stdin (the start barrier),
then enqueues {"n": N} in a transaction and prints what it saw as JSON: the job's id, whether it
made the job, and its transaction id (the row's xmin names the last writer).
"""

from __future__ import annotations

import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django.setup()

from django.db import connections, transaction  # noqa: E402

import reliableq  # noqa: E402
from reliableq.conf import queue_alias  # noqa: E402


def main() -> None:
    n = int(sys.argv[1])
    connection = connections[queue_alias()]  # the queue's: a database of its own when it has one
    connection.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    with transaction.atomic(using=queue_alias()):
        job = reliableq.enqueue("demo.noop", {"n": n}, unique_key="racing", debounce=60)
        with connection.cursor() as cursor:
            cursor.execute("SELECT (txid_current() % 4294967296)::text")
            (txid,) = cursor.fetchone()
    print(json.dumps({"id": str(job.id), "payload": job.payload, "txid": txid}), flush=True)


if __name__ == "__main__":
    main()
