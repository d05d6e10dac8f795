"""Workflow cancels: a dead member's dependents cancelled transitively, with an unrelated job beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import Procs, Summary, percentile, wait_for
from ..systems import QUEUE, _one
from .context import Bench
from .helpers import Section, table
from .registry import scenario
from .workflows import KIND, _loaded, _reset

HEAD = "wf.step"  # testproject/jobs.py: fails for good when its payload says so
WORKER = (1, 4)
UNRELATED = 5  # unrelated jobs timed one at a time before each cancel: the usual latency
# The `after` entries of each graph: a chain and a fan-out stop at the 10,000-member bound.
EDGES = (1_000, 10_000, 100_000)
MAX_MEMBERS = 10_000
MAX_AFTER = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    name: str
    members: int  # with the head
    edges: int  # `after` entries


def shapes(edges: int) -> list[Shape]:
    """The chain, the fan-out and the dense graph (each member after every earlier one) of about `edges`
    `after` entries, none past the bounds (10,000 members, 100,000 entries)."""
    made = []
    if edges <= MAX_MEMBERS:
        members = min(edges + 1, MAX_MEMBERS)
        made += [Shape(name="chain", members=members, edges=members - 1),
                 Shape(name="fan-out", members=members, edges=members - 1)]  # fmt: skip
    dense = 2
    while (dense + 1) * dense // 2 <= min(edges, MAX_AFTER):
        dense += 1
    made.append(Shape(name="dense", members=dense, edges=dense * (dense - 1) // 2))
    return made


def _build(shape: Shape, run: str) -> Any:
    import reliableq

    wf = reliableq.workflow(name=run)
    head = wf.add(HEAD, {"fail": True}, name="m0", queue=QUEUE)
    added = [head]
    for i in range(1, shape.members):
        if shape.name == "chain":
            after = [added[-1]]
        elif shape.name == "fan-out":
            after = [head]
        else:
            after = list(added)
        added.append(wf.add(KIND, {}, name=f"m{i}", after=after, queue=QUEUE))
    wf.on("complete", KIND, {}, queue=QUEUE)
    return wf


def _unrelated(bench: Bench, procs: Procs, what: str) -> tuple[float, float]:
    """One job of no workflow: (created to started, created to finished), seconds, from the database."""
    import reliableq

    job = reliableq.enqueue(KIND, {}, queue=QUEUE)
    wait_for(
        lambda: _one("SELECT status FROM reliableq_job WHERE id = %s", [job.pk])[0] == "SUCCEEDED",
        timeout=60,
        interval=0.005,
        what=what,
        procs=procs,
    )
    started, finished = _one(
        """SELECT extract(epoch FROM a.started_at - j.created_at), extract(epoch FROM j.finished_at - j.created_at)
             FROM reliableq_job j JOIN reliableq_attempt a ON a.job_id = j.id WHERE j.id = %s""",
        [job.pk],
    )
    return float(started), float(finished)


def _cancel(bench: Bench, procs: Procs, shape: Shape, run: str) -> dict[str, Any]:
    """Store the graph, let its head die, time an unrelated job sent at that moment; gate; the figures."""
    import reliableq

    _reset()
    usual = [_unrelated(bench, procs, f"{run}: an unrelated job") for _ in range(UNRELATED)]
    record = _loaded(_build(shape, run).enqueue)
    head = _one("SELECT id FROM reliableq_job WHERE workflow_id = %s AND member_name = 'm0'", [record.pk])[0]
    wait_for(
        lambda: _one("SELECT status FROM reliableq_job WHERE id = %s", [head])[0] == "DEAD",
        timeout=60,
        interval=0.001,
        what=f"{run}: the head to die",
        procs=procs,
    )
    beside = reliableq.enqueue(KIND, {}, queue=QUEUE)
    wait_for(
        lambda: _one("SELECT status FROM reliableq_workflow WHERE id = %s", [record.pk])[0] != "RUNNING",
        timeout=120,
        interval=0.01,
        what=f"{run}: every dependent cancelled",
        procs=procs,
    )
    wait_for(
        lambda: _one("SELECT status FROM reliableq_job WHERE id = %s", [beside.pk])[0] == "SUCCEEDED",
        timeout=60,
        interval=0.005,
        what=f"{run}: the unrelated job",
        procs=procs,
    )
    cancelled, span, in_head, status = _one(
        """
        SELECT count(*) FILTER (WHERE j.status = 'CANCELLED'),
               extract(epoch FROM max(j.finished_at) - (SELECT h.finished_at FROM reliableq_job h WHERE h.id = %s)),
               count(*) FILTER (WHERE j.finished_at = (SELECT h.finished_at FROM reliableq_job h WHERE h.id = %s)
                                  AND j.status = 'CANCELLED'),
               (SELECT w.status FROM reliableq_workflow w WHERE w.id = %s)
          FROM reliableq_job j WHERE j.workflow_id = %s AND j.member_name IS NOT NULL
        """,
        [head, head, record.pk, record.pk],
    )
    bench.gate.check(run, f"{shape.members - 1} dependents cancelled ({cancelled})", cancelled == shape.members - 1)
    bench.gate.check(run, f"the workflow FAILED ({status})", status == "FAILED")
    started, finished, shared = _one(
        """SELECT extract(epoch FROM a.started_at - j.created_at), extract(epoch FROM j.finished_at - j.created_at),
                  EXISTS (SELECT 1 FROM reliableq_job m WHERE m.workflow_id = %s AND m.member_name IS NOT NULL
                                 AND m.finished_at = j.finished_at)
             FROM reliableq_job j JOIN reliableq_attempt a ON a.job_id = j.id WHERE j.id = %s""",
        [record.pk, beside.pk],
    )
    bench.gate.check(run, "the unrelated job's finish shared no transaction with the cancel", not shared)
    figures = {
        "shape": shape.name,
        "members": shape.members,
        "edges": shape.edges,
        "cancel_s": float(span),
        "in_head": int(in_head),
        "usual_ms": [1000 * f for _, f in usual],
        "beside_start_ms": 1000 * float(started),
        "beside_ms": 1000 * float(finished),
    }
    bench.say(
        f"  {run}: {cancelled:,} cancelled in {float(span):.3f} s ({in_head} by the head's own finish); an unrelated "
        f"job beside it {figures['beside_ms']:.1f} ms (usual {', '.join(f'{u:.1f}' for u in figures['usual_ms'])})"
    )
    return figures


@scenario("cancels", title="Workflow cancels: a dead member's dependents, and a job beside them", knobs=("reps",))
def cancels(bench: Bench, s: Section) -> None:
    p = bench.p
    wp, wc = WORKER
    cases = [shape for edges in EDGES for shape in shapes(edges)]
    s.intro = (
        f"A workflow whose first member (`m0`) dies at once (`{HEAD}` raising PermanentError), every other member "
        "waiting on it: a chain (each member after the one before), a fan-out (each after `m0`) and a dense "
        "graph (each after every earlier one), of about 1,000, 10,000 and 100,000 `after` entries (a chain and "
        f"a fan-out of 100,000 would pass the {MAX_MEMBERS:,}-member bound). On {wp} x {wc} worker, each case "
        f"{p.reps} time(s): the cancel's span is from `m0`'s finish to the last dependent's (each `finished_at` "
        "is its transaction's start); an unrelated job is enqueued the moment `m0` is DEAD, and its time from "
        f"created_at to finished_at is set beside {UNRELATED} unrelated jobs timed alone just before."
    )
    results: list[dict[str, Any]] = []
    with Procs(bench.logs) as procs:
        bench.rq.start_workers(procs, processes=wp, concurrency=wc, tag="cancels")
        bench.rq.warm_up(procs, wp * wc)
        for shape in cases:
            for rep in range(p.reps):
                results.append(_cancel(bench, procs, shape, f"cancels {shape.name} of {shape.edges:,} rep {rep + 1}"))
    _reset()
    rows = []
    for shape in cases:
        mine = [r for r in results if r["shape"] == shape.name and r["edges"] == shape.edges]
        spans = Summary([r["cancel_s"] for r in mine])
        usual = [u for r in mine for u in r["usual_ms"]]
        rows.append(
            [
                shape.name,
                f"{shape.members:,}",
                f"{shape.edges:,}",
                ", ".join(f"{r['cancel_s']:.3f}" for r in mine),
                f"{spans.median:.3f}",
                ", ".join(str(r["in_head"]) for r in mine),
                ", ".join(f"{r['beside_ms']:.1f}" for r in mine),
                f"{percentile(usual, 50):.1f} ({min(usual):.1f}–{max(usual):.1f})",
            ]
        )
    s.tables.append(
        table(
            [
                "graph",
                "members",
                "after entries",
                "cancel span s (each)",
                "median s",
                "cancelled in the head's finish (each)",
                "unrelated job beside it, ms (each)",
                "unrelated job alone, ms: p50 (range)",
            ],
            rows,
        )
    )
    s.notes.append(
        "A finish cancels at most reliableq.queue.graph.WALK dependents (and WALK_EDGES edges out of them) "
        "itself and hands the rest on; the worker's completer thread cancels them in short transactions of "
        "the same bound, between its batches of ends, so an unrelated job's finish waits behind one of them "
        "at most."
    )
    s.data = {"cases": results}
