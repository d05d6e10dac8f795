"""One POST /v1/jobs at a time: its latency with the token function and with the plain statement.

    python -m bench.tokencost [--requests 500] [--rounds 4]

The API looks up each request's token, user and permissions either by calling the PL/pgSQL
function migration 0010 creates (reliableq.api.tokenfunction: the server keeps its plan) or by
sending the statement, planned on every request (where the function is not installed). This
makes single requests through Django's WSGI handler in this process (no server, no socket: the
application's and PostgreSQL's work, on one persistent connection as a server's thread has it),
in turns of --requests, alternating the two ways --rounds times each so that load from elsewhere
on a shared machine falls on both alike. Prints each turn's median and p99 in microseconds and
the ratio of the medians; every answer must be a 202.

Needs a database (DATABASE_URL or the embedded server).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ.setdefault("TESTPROJECT_SUBMIT_RATE", "100000000/min")  # measure the lookup, not the throttle
os.environ.setdefault("RELIABLEQ_HTTP_QUEUES", '["*"]')
os.environ.setdefault("RELIABLEQ_MAX_PENDING_PER_SUBMITTER", "None")

USER = "bench-tokencost"
QUEUE = "bench-tokencost"
WAYS = ("function", "statement")


def _setup() -> tuple[str, Any]:
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command

    from testproject import accounts

    call_command("migrate", verbosity=0)
    return accounts.token_for(USER, "reliableq.submit_job"), WSGIHandler()


def _turn(handler: Any, token: str, count: int) -> list[float]:
    """`count` requests, one after another: each one's seconds."""
    from .httpcost import post

    body = json.dumps({"kind": "demo.noop", "payload": {"n": 1}, "queue": QUEUE}).encode()
    took = []
    for _ in range(count):
        began = time.perf_counter()
        status = post(handler, "/v1/jobs", body, HTTP_AUTHORIZATION=f"Token {token}")
        took.append(time.perf_counter() - began)
        if not status.startswith("202"):
            raise SystemExit(f"POST /v1/jobs answered {status}")
    return took


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tokencost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    token, handler = _setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from reliableq.api import tokenfunction
    from reliableq.models import Job

    with_function = tokenfunction.positions
    if with_function(connection, get_user_model()) is None:
        raise SystemExit("the token function is not installed on this database (the queue on a database of its own?)")
    _turn(handler, token, 50)  # warm: the connection, the kept plans, Python's caches
    medians: dict[str, list[float]] = {way: [] for way in WAYS}
    print("| round | way | median us | p99 us |")
    print("| --- | --- | ---: | ---: |")
    for n in range(args.rounds):
        for way in WAYS if n % 2 == 0 else reversed(WAYS):
            tokenfunction.positions = with_function if way == "function" else (lambda *a, **k: None)
            try:
                took = _turn(handler, token, args.requests)
            finally:
                tokenfunction.positions = with_function
            medians[way].append(statistics.median(took))
            print(f"| {n + 1} | {way} | {statistics.median(took) * 1e6:,.0f} | {_p99(took) * 1e6:,.0f} |", flush=True)
    Job.objects.filter(queue=QUEUE).delete()
    f, s = (statistics.median(medians[way]) for way in WAYS)
    ratios = [a / b for a, b in zip(medians["function"], medians["statement"], strict=True)]
    print(
        f"\nmedian of the turns' medians: function {f * 1e6:,.0f} us, statement {s * 1e6:,.0f} us; "
        f"function / statement {f / s:.2f} (turns {min(ratios):.2f}-{max(ratios):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
