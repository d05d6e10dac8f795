"""What the one door costs the worker's path, beside the two other ways it could have been built.

    python -m bench.doorcost [--jobs 4000] [--reps 3] [--batch 16]

One process claims and finishes no-op jobs (no handler: the queue's statements alone, as
reliableq.testing would, without running anything) on the harness's own PostgreSQL, in three arms,
alternated within each repetition:

- `door` (what ships): the finish statement composed in Python (reliableq.queue.door), plain jobs
  leaving out the workflow CTEs;
- `trigger`: the same, with a statement-level AFTER UPDATE trigger on the job table with transition
  tables, whose body only looks for a workflow member among the new rows, as the smallest trigger
  that could decide what follows a change would; it fires for every UPDATE of a job (claim, renewal,
  progress, finish);
- `function`: the finish as a PL/pgSQL function taking the batch's JSON (procrastinate's
  procrastinate_finish_job is the model), called by `SELECT * FROM ...`.

Jobs per second of each arm (claim + finish of `--batch` jobs a round, one connection), every
repetition, and each arm's median over `door`'s, paired within a repetition.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid

ARMS = ("door", "trigger", "function")
QUEUE = "bench-doorcost"

TRIGGER = """
CREATE OR REPLACE FUNCTION bench_door_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM changed n WHERE n.workflow_id IS NOT NULL LIMIT 1;
    RETURN NULL;
END $$;
CREATE TRIGGER bench_door AFTER UPDATE ON reliableq_job REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION bench_door_changed();
"""
NO_TRIGGER = "DROP TRIGGER IF EXISTS bench_door ON reliableq_job"


def _function_sql(finish_sql: str) -> str:
    """The finish statement as the body of a PL/pgSQL function of the batch's JSON."""
    body = finish_sql.replace("%s", "rows")
    return f"""
DROP FUNCTION IF EXISTS bench_finish(jsonb);
CREATE FUNCTION bench_finish(rows jsonb) RETURNS TABLE (r_job uuid, r_outcome varchar, r_again boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY {body};
END $fn$"""


def _round(arm: str, batch: int, worker: str) -> int:
    """Claim up to `batch` due jobs and finish them SUCCEEDED; how many."""
    from reliableq import queue as jobqueue
    from reliableq.models import JobStatus, Outcome
    from reliableq.queue import Finish, db

    jobs, _ = jobqueue.claim(worker_id=worker, queues=(QUEUE,), limit=batch, lease_seconds=30, rescue=False)
    if not jobs:
        return 0
    finishes = [
        Finish(job_id=j.id, lease_token=j.lease_token, status=JobStatus.SUCCEEDED, outcome=Outcome.SUCCEEDED)
        for j in jobs
    ]
    if arm == "function":
        rows = json.dumps([[f.job_id.hex, f.lease_token.hex, f.status, f.outcome, "", 0.0, ""] for f in finishes])
        with db.cursor() as cursor:
            db.run(cursor, "SELECT * FROM bench_finish(%s::jsonb)", [rows])
            cursor.fetchall()
    else:
        jobqueue.finish(finishes)
    return len(jobs)


def _arm(arm: str, jobs: int, batch: int) -> float:
    from django.db import connection

    import reliableq
    from reliableq.queue import db

    with db.cursor() as cursor:
        cursor.execute("TRUNCATE reliableq_job, reliableq_attempt CASCADE")
        cursor.execute(TRIGGER if arm == "trigger" else NO_TRIGGER)
    reliableq.enqueue_many("demo.noop", [{}] * jobs, queue=QUEUE)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE reliableq_job, reliableq_attempt")
    worker = f"door-{uuid.uuid4().hex[:6]}"
    began = time.perf_counter()
    done = 0
    while True:
        n = _round(arm, batch, worker)
        if not n:
            break
        done += n
    elapsed = time.perf_counter() - began
    with db.cursor() as cursor:
        cursor.execute(NO_TRIGGER)
    if done != jobs:
        raise SystemExit(f"{arm}: finished {done} of {jobs} jobs")
    return done / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.doorcost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    from . import core

    core.prepare_environment(core.start_server())
    import django

    django.setup()
    from django.core.management import call_command

    from reliableq.queue import db, finishes

    call_command("migrate", verbosity=0)
    with db.cursor() as cursor:
        cursor.execute(_function_sql(finishes._finish_sql(False)))
    rates: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for rep in range(args.reps):
        order = ARMS if rep % 2 == 0 else tuple(reversed(ARMS))
        for arm in order:
            rates[arm].append(_arm(arm, args.jobs, args.batch))
            print(f"  rep {rep + 1} {arm}: {rates[arm][-1]:,.0f} jobs/s", file=sys.stderr)
    print(f"Claim and finish of no-op jobs, one connection, {args.batch} a round, {args.jobs:,} jobs an arm")
    print()
    print("| arm | jobs/s, each repetition | median | of door, paired (range) |")
    print("| --- | --- | ---: | ---: |")
    for arm in ARMS:
        paired = [r / d for r, d in zip(rates[arm], rates["door"], strict=True)]
        print(
            f"| {arm} | {', '.join(f'{r:,.0f}' for r in rates[arm])} | {statistics.median(rates[arm]):,.0f} | "
            f"{statistics.median(paired):.0%} ({min(paired):.0%}-{max(paired):.0%}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
