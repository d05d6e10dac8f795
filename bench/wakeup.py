"""Enqueue-to-start latency with and without LISTEN/NOTIFY wake-ups, measured side by side.

    python -m bench.wakeup [--jobs 40] [--poll 1.0]

For each mode a real `runworker` (concurrency 4, POLL_SECONDS=--poll) idles; this script
enqueues jobs one at a time at random moments, and reads each job's latency from the
database: its first attempt's started_at minus its created_at (both database time).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django

django.setup()

from django.db import connection  # noqa: E402

import reliableq  # noqa: E402
from reliableq.models import Attempt, Job  # noqa: E402
from testproject import dburl, processes  # noqa: E402


def measure(*, listen: bool, jobs: int, poll: float, rng: random.Random) -> list[float]:
    queue = f"wakeup-{uuid.uuid4().hex[:8]}"
    env = processes.child_env(
        DATABASE_URL=dburl.build(connection.settings_dict),
        RELIABLEQ_POLL_SECONDS=str(poll),
        RELIABLEQ_LISTEN_NOTIFY="1" if listen else "0",
        RELIABLEQ_LOG_LEVEL="WARNING",
    )
    worker = processes.start_worker(["--queues", queue, "--concurrency", "4"], env=env)
    try:
        time.sleep(2.0)  # let it start and reach its idle wait
        ids = []
        for _ in range(jobs):
            time.sleep(rng.uniform(0.05, poll * 1.5))  # arrive at any point of the poll cycle
            ids.append(reliableq.enqueue("demo.noop", {}, queue=queue).id)
        deadline = time.monotonic() + 30
        while Job.objects.filter(id__in=ids, status="SUCCEEDED").count() < len(ids):
            if time.monotonic() > deadline:
                raise SystemExit("jobs did not finish; is the worker running?")
            time.sleep(0.1)
    finally:
        processes.stop(worker)
    started = dict(Attempt.objects.filter(job_id__in=ids, number=1).values_list("job_id", "started_at"))
    latencies = [(started[j.id] - j.created_at).total_seconds() * 1000 for j in Job.objects.filter(id__in=ids)]
    Job.objects.filter(id__in=ids).delete()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--poll", type=float, default=1.0, help="POLL_SECONDS for both workers")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"{args.jobs} jobs per mode, POLL_SECONDS={args.poll:g}, one worker (concurrency 4)", file=sys.stderr)
    print("| wake-up | p50 ms | p95 ms | max ms |")
    print("| --- | ---: | ---: | ---: |")
    for listen in (True, False):
        lat = sorted(measure(listen=listen, jobs=args.jobs, poll=args.poll, rng=rng))
        p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
        name = "LISTEN/NOTIFY + polling" if listen else "polling only"
        print(f"| {name} | {statistics.median(lat):.1f} | {p95:.1f} | {lat[-1]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
