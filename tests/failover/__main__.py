"""python -m tests.failover: repeated failovers under load, measured, for each mode and lease length.

    python -m tests.failover --modes sync,async --lease-seconds 2,5,15 --failovers 5

For each mode and lease length: a primary and a standby (synchronous or asynchronous), the API and
two workers on both hosts, HTTP and enqueue load; every --load-seconds the primary crashes
(pg_ctl stop -m immediate), the standby is promoted --gap seconds later, and the old primary is
rebuilt as the new standby. Then it counts what clients were told against what the last primary
has (acknowledged jobs, charges, finishes) and, for each failover, how long the queue took to
claim again after the promote and to finish the jobs that were running at the crash. Prints
Markdown tables; takes about a minute per failover on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")


def numbers(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def fmt(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}"


def main() -> int:
    from .pair import Pair
    from .runner import DATA_DIR, FailoverRun, Outcome

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="sync,async", help="sync, async or both (comma-separated)")
    parser.add_argument("--lease-seconds", type=numbers, default=[2.0, 5.0, 15.0], help="comma-separated")
    parser.add_argument("--failovers", type=int, default=5, help="failovers per mode and lease length")
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between the crash and the promote")
    parser.add_argument("--load-seconds", type=float, default=8.0, help="load before each failover")
    parser.add_argument("--log-dir", type=Path, default=Path(".pgdata/failover-logs"))
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - {"sync", "async"} or not modes:
        parser.error("--modes takes sync, async or both")
    if args.failovers < 1 or not args.lease_seconds or min(args.lease_seconds) <= 0:
        parser.error("--failovers must be at least 1 and every lease length positive")

    started = time.monotonic()
    pair = Pair(DATA_DIR, synchronous=True).start()
    outcomes: list[Outcome] = []
    try:
        for mode in modes:
            for lease in args.lease_seconds:
                log_dir = args.log_dir / f"{mode}-{lease:g}"
                pair.ensure_standby(synchronous=mode == "sync")
                run = FailoverRun(pair, lease_seconds=lease, log_dir=log_dir, say=say)
                try:
                    run.start()
                    for n in range(args.failovers):
                        time.sleep(args.load_seconds)
                        if n:
                            pair.ensure_standby(synchronous=mode == "sync")  # the old primary, rebuilt
                        run.fail_over(gap=args.gap)
                    time.sleep(args.load_seconds)
                    outcome = run.finish(settle_seconds=max(120.0, 4 * lease))
                finally:
                    run.shutdown()
                say(outcome.summary())
                outcomes.append(outcome)
    finally:
        pair.stop()

    print("| mode | lease | failovers | resumed (first claim after the promote), s | in flight at the crash | "
          "their last end after the promote, s | leases expired | workers exited |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for o in outcomes:
        resumes = [f.resume_seconds for f in o.failovers]
        known = [r for r in resumes if r is not None]
        ends = [f.since_promote(f.in_flight_done_at) for f in o.failovers]
        print(
            f"| {'synchronous' if o.synchronous else 'asynchronous'} | {o.lease_seconds:g} s | {len(o.failovers)} "
            f"| median {fmt(statistics.median(known) if known else None)}, each {', '.join(map(fmt, resumes))} "
            f"| {', '.join(str(f.in_flight) for f in o.failovers)} | {', '.join(map(fmt, ends))} "
            f"| {sum(f.expired for f in o.failovers)} | {len(o.exited)} |"
        )
    print()
    print("| mode | lease | failovers | standby lag at each crash, bytes | jobs acknowledged / lost "
          "| charges acknowledged / lost | finishes committed / lost | violations |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for o in outcomes:
        print(
            f"| {'synchronous' if o.synchronous else 'asynchronous'} | {o.lease_seconds:g} s | {len(o.failovers)} "
            f"| {', '.join(str(f.lag_bytes) for f in o.failovers)} | {o.acked_jobs} / {len(o.missing_jobs)} "
            f"| {o.acked_charges} / {len(o.missing_charges)} | {o.acked_finishes} / {len(o.lost_finishes)} "
            f"| {len(o.report.violations)} |"
        )
    print()
    total = sum(len(o.failovers) for o in outcomes)
    print(f"{total} failover(s) in {time.monotonic() - started:.0f}s")
    bad = [o for o in outcomes if o.exited or o.report.violations or (o.synchronous and (
        o.missing_jobs or o.missing_charges or o.lost_finishes))]  # fmt: skip
    for o in bad:
        for line in o.report.violations[:20]:
            print(f"  {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
