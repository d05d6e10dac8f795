"""The practical ceiling for Python: ReliableQ's claim and finish statements in a bare psycopg loop.

    python -m bench.bare STATEMENTS_JSON --batch 8 --worker-id bare-0

No Django, no threads, no handler, no logging: claim a batch (the captured rescue and take
statements, in one transaction, exactly as jobqueue.claim sends them), then finish the whole
batch (the captured finish statement, in its own transaction). Stops at the first empty claim:
with SKIP LOCKED, a row it skipped is held by another claimer, who will take it.
Statements come from bench.ceilings.capture(), so this loop and the worker send the same SQL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import psycopg


def swap(params: list, mapping: dict) -> list:
    return [mapping.get(p, p) if isinstance(p, (str, int)) and not isinstance(p, bool) else p for p in params]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("statements")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--start-at", type=float, default=0.0, help="time.time() to start at, once connected")
    args = parser.parse_args(argv)
    with open(args.statements) as f:
        spec = json.load(f)
    mapping = {spec["worker_id"]: args.worker_id, spec["limit"]: args.batch}
    limit = f"LIMIT {spec['limit']}"
    claim = [(sql.replace(limit, f"LIMIT {args.batch}"), swap(params, mapping)) for sql, params in spec["claim"]]
    finish_sql = spec["finish"]["sql"]
    done = 0
    # The queue's statements bind on the server and are prepared once per connection (reliableq.queue.db.run);
    # so are this loop's. Autocommit, with explicit transactions where the worker has
    # them: a single-statement claim or finish is sent alone, as Django sends it outside atomic().
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, prepare_threshold=2**31 - 1) as conn:
        claim_tx = conn.transaction if spec["claim_atomic"] else contextlib.nullcontext
        finish_tx = conn.transaction if spec["finish_atomic"] else contextlib.nullcontext
        time.sleep(max(0.0, args.start_at - time.time()))  # every process connected, then all start together
        while True:
            with claim_tx():
                rows = []
                for sql, params in claim:
                    cur = conn.execute(sql, params, prepare=True)
                    rows = cur.fetchall() if cur.description else rows
            if not rows:
                break
            n = len(rows)
            with finish_tx():
                # The batch's ends as the worker sends them: one JSON text (reliableq.queue.finishes).
                ends = json.dumps([[str(r[0]), str(r[7]), "SUCCEEDED", "SUCCEEDED", "", 0.0, ""] for r in rows])
                conn.execute(finish_sql, [ends], prepare=True)
            done += n
    print(json.dumps({"done": done}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
