"""python -m tests.chaos --seeds 20 --jobs 1200: the long chaos profile, with a summary table."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")


def main() -> int:
    from .runner import LONG, ChaosRun, Profile, reproduce_command

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=LONG.seeds)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=LONG.jobs, help="jobs per seed")
    parser.add_argument("--workers", type=int, default=LONG.workers)
    parser.add_argument("--fault-seconds", type=float, default=LONG.fault_seconds)
    parser.add_argument("--concurrency", type=int, default=LONG.concurrency, help="slots per worker")
    parser.add_argument("--workflows", type=int, default=LONG.workflows, help="workflows per seed")
    parser.add_argument(
        "--failovers", type=int, default=LONG.failovers, help="failovers per seed (none through PgBouncer)"
    )
    parser.add_argument(
        "--pool-size", type=int, default=None, help="through PgBouncer (transaction mode) with this pool size"
    )
    parser.add_argument("--log-dir", type=Path, default=Path(".pgdata/chaos-logs"))
    args = parser.parse_args()
    if args.seeds < 1 or args.jobs < 1 or args.workers < 1:
        parser.error("--seeds, --jobs and --workers must be at least 1")
    if args.failovers < 0 or (args.failovers and args.pool_size):
        parser.error("--failovers must be 0 or more, and 0 with --pool-size (PgBouncer is given one server)")
    profile = Profile(
        seeds=args.seeds,
        jobs=args.jobs,
        workers=args.workers,
        fault_seconds=args.fault_seconds,
        concurrency=args.concurrency,
        pool_size=args.pool_size,
        workflows=args.workflows,
        failovers=0 if args.pool_size else args.failovers,
    )
    args.log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    totals: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    acknowledged = 0
    failed = []
    print("| seed | jobs | acknowledged, all present | SUCCEEDED | DEAD | faults injected | violations | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        outcome = ChaosRun(seed, profile, log_dir=args.log_dir, say=lambda s: print(f"  {s}", file=sys.stderr)).run()
        totals += outcome.faults
        statuses += outcome.statuses
        acknowledged += outcome.report.checked.get("acknowledged_present", 0)
        faults = ", ".join(f"{k} {v}" for k, v in sorted(outcome.faults.items()))
        print(
            f"| {seed} | {outcome.jobs} | {outcome.report.checked.get('acknowledged_present', 0)} "
            f"| {outcome.statuses['SUCCEEDED']} | {outcome.statuses['DEAD']} | {faults} "
            f"| {len(outcome.report.violations)} | {outcome.seconds:.0f} |",
            flush=True,
        )
        if profile.pool_size:
            print(
                f"    through PgBouncer: at most {outcome.peak_pooled} server connection(s) and "
                f"{outcome.peak_listening} direct LISTEN connection(s) in {outcome.samples} samples",
                flush=True,
            )
        if not outcome.ok:
            failed.append(seed)
            for line in outcome.report.violations:
                print(f"    {line}", file=sys.stderr)
            print(f"    reproduce: {reproduce_command(seed, profile)}", file=sys.stderr)
    print()
    print(
        f"{args.seeds} seed(s), {args.seeds * args.jobs} jobs, {acknowledged} acknowledged (each checked "
        f"present on the last primary), {statuses['SUCCEEDED']} SUCCEEDED, "
        f"{statuses['DEAD']} DEAD, violations in {len(failed)} seed(s), {time.monotonic() - started:.0f}s"
    )
    print("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        code = main()
    finally:
        from testproject import embedded

        embedded.stop_started_here()  # the suite's own server, if this run started it
    sys.exit(code)
