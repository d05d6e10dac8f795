"""Workflows: a fan-in against as many independent jobs, a chain's time per link, a callback's delay."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import DatabaseError, transaction

from ..core import Procs, Summary, percentile, ratio, wait_for
from ..systems import QUEUE, _all, _exec, _one
from .context import Bench
from .helpers import Section, fmt_pct, table
from .registry import scenario

T = TypeVar("T")
KIND = "demo.noop"  # testproject/jobs.py: a no-op usable as a member and as a callback
REPORT = "report"  # the fan-in's last member, after all the others
CHAIN_WORKER = (1, 1)  # one process, one slot: a chain runs one link at a time anyway
# TRUNCATE names the tables in the order a member's finish locks them (the job, the counts, the
# workflow, then the attempt and its return value), as ReliableQ.reset does for its own.
TABLES = (
    "reliableq_job, reliableq_workflowcount, reliableq_workflow, reliableq_workflowedge, reliableq_attempt, "
    "reliableq_returnvalue, reliableq_batchkey, reliableq_ratewindow, reliableq_workflowcascade, reliableq_step"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Callback:
    """When a workflow's success callback started, against the workflow's end and its last member's."""

    after_workflow: float  # the callback's attempt started_at - the workflow's finished_at, s
    after_member: float  # ... - the last member's finished_at, s
    created: float  # the callback's created_at - the workflow's finished_at, s (the same transaction: 0)


@scenario(
    "workflows",
    title="Workflows: fan-in, chain, callbacks",
    knobs=("reps", "workflow_members", "workflow_chain", "fleet"),
)
def workflows(bench: Bench, s: Section) -> None:
    from reliableq.workflows import MAX_MEMBERS  # the models: only once Django is set up

    p = bench.p
    fp, fc = p.fleet
    n, links = p.workflow_members, p.workflow_chain
    cp, cc = CHAIN_WORKER
    s.intro = (
        f"Three measurements of `{KIND}` jobs, each repeated {p.reps} time(s). "
        f"(a) On one fleet of {fp} x {fc}, alternating (which goes first alternates too): {n:,} independent "
        f"jobs loaded in one commit (`enqueue_many`), and one workflow of as many: {n - 1:,} members and a "
        "`report` member after all of them (`workflow().enqueue()`, one commit; a workflow holds at most "
        f"{MAX_MEMBERS:,} members). The rate is jobs over the span the database "
        "recorded, from the first attempt's start to the last finish (the report member's, for the workflow). "
        f"(b) A chain of {links:,} members, each after the one before, on {cp} x {cc} worker: the time per link "
        "is that span over the links, and the gap between links is each link's attempt start minus the "
        "previous link's attempt finish. (c) Each workflow has a success callback: its delay is its "
        "attempt's start minus the workflow's finished_at (set in the transaction of the last member's finish)."
    )
    _reset()
    independent = bench.repetitions(jobs=f"{n:,} independent", workers=f"{fp} x {fc}")
    fan_in = bench.repetitions(jobs=f"a fan-in of {n - 1:,} + report", workers=f"{fp} x {fc}")
    details: list[dict[str, Any]] = []
    with Procs(bench.logs) as procs:
        bench.rq.start_workers(procs, processes=fp, concurrency=fc, tag="wf")
        bench.rq.warm_up(procs, fp * fc)
        _warm_workflow(bench, procs, fp * fc)  # a member's claim and finish are compiled on first use
        for rep in range(p.reps):
            order = ("independent", "fan-in") if rep % 2 == 0 else ("fan-in", "independent")
            for arm in order:
                if arm == "independent":
                    rate = _independent(bench, procs, n, f"workflows {n:,} independent rep {rep + 1}")
                    independent.values.append(rate)
                else:
                    rate, detail = _fan_in(bench, procs, n, f"workflows fan-in of {n - 1:,} rep {rep + 1}")
                    fan_in.values.append(rate)
                    details.append(detail)
    paired = [ratio(f, i) for f, i in zip(fan_in.values, independent.values, strict=True)]
    alone = Summary([d["members_rate"] for d in details])
    alone_paired = [ratio(a, i) for a, i in zip(alone.values, independent.values, strict=True)]
    chain_rates = bench.repetitions(jobs=f"a chain of {links:,}", workers=f"{cp} x {cc}", unit="links/s")
    chains: list[dict[str, Any]] = []
    with Procs(bench.logs) as procs:
        bench.rq.start_workers(procs, processes=cp, concurrency=cc, tag="wf-chain")
        bench.rq.warm_up(procs, cp * cc)
        _warm_workflow(bench, procs, 2)
        for rep in range(p.reps):
            chain = _chain(bench, procs, links, f"workflows chain of {links:,} rep {rep + 1}")
            chain_rates.values.append(links / chain["span"])
            chains.append(chain)
    _reset()

    rows = [
        [
            rep + 1,
            f"{independent.values[rep]:,.0f}",
            f"{fan_in.values[rep]:,.0f}",
            fmt_pct(paired[rep]),
            f"{d['members_rate']:,.0f}",
            fmt_pct(ratio(d["members_rate"], independent.values[rep])),
            f"{d['enqueue_s']:.2f}",
            f"{1000 * d['report_wait']:.1f}",
            f"{1000 * d['report_run']:.1f}",
        ]
        for rep, d in enumerate(details)
    ]
    rows.append(
        [
            "median (range)",
            independent.text(),
            fan_in.text(),
            f"{fmt_pct(ratio(fan_in.median, independent.median))} ({fmt_pct(min(paired))}–{fmt_pct(max(paired))})",
            alone.text(),
            f"{fmt_pct(ratio(alone.median, independent.median))} ({fmt_pct(min(alone_paired))}–"
            f"{fmt_pct(max(alone_paired))})",
            "",
            "",
            "",
        ]
    )
    s.tables.append(
        f"**(a) {n:,} independent jobs against a workflow of {n:,}: {n - 1:,} members and a report after them, "
        f"{fp} x {fc}, alternating**\n\n"
        + table(
            [
                "repetition",
                "independent jobs/s",
                "fan-in jobs/s",
                "fan-in / independent",
                f"its {n - 1:,} members alone, jobs/s",
                "members alone / independent",
                "workflow enqueue s",
                "report start after the last member ms",
                "report attempt ms",
            ],
            rows,
        )
    )
    link_ms = Summary([1000 * c["span"] / links for c in chains])
    gaps = [g for c in chains for g in c["gaps"]]
    rows = [
        [
            rep + 1,
            f"{1000 * c['span'] / links:.2f}",
            f"{1000 * percentile(c['gaps'], 50):.2f}",
            f"{1000 * percentile(c['gaps'], 99):.2f}",
            f"{1000 * max(c['gaps']):.2f}",
            f"{1000 * percentile(c['runs'], 50):.2f}",
            f"{c['enqueue_s']:.2f}",
        ]
        for rep, c in enumerate(chains)
    ]
    rows.append(
        [
            "median (range) / pooled",
            link_ms.text(2),
            f"{1000 * percentile(gaps, 50):.2f}",
            f"{1000 * percentile(gaps, 99):.2f}",
            f"{1000 * max(gaps):.2f}",
            f"{1000 * percentile([r for c in chains for r in c['runs']], 50):.2f}",
            "",
        ]
    )
    s.tables.append(
        f"**(b) A chain of {links:,} members, {cp} x {cc} worker**\n\n"
        + table(
            [
                "repetition",
                "ms per link",
                "gap p50 ms",
                "gap p99 ms",
                "gap max ms",
                "attempt p50 ms",
                "workflow enqueue s",
            ],
            rows,
        )
    )
    callbacks = [("fan-in", d["callback"]) for d in details] + [("chain", c["callback"]) for c in chains]
    rows = []
    for shape in ("fan-in", "chain"):
        mine = [cb for sh, cb in callbacks if sh == shape]
        rows.append(
            [
                shape,
                ", ".join(f"{1000 * cb.after_workflow:.1f}" for cb in mine),
                f"{1000 * percentile([cb.after_workflow for cb in mine], 50):.1f}",
                f"{1000 * max(cb.after_workflow for cb in mine):.1f}",
                ", ".join(f"{1000 * cb.after_member:.1f}" for cb in mine),
                ", ".join(f"{1000 * cb.created:.1f}" for cb in mine),
            ]
        )
    s.tables.append(
        "**(c) The success callback's delay, each repetition**\n\n"
        + table(
            [
                "workflow",
                "start - workflow finished_at, ms (each)",
                "p50 ms",
                "max ms",
                "start - last member's finished_at, ms (each)",
                "created_at - workflow finished_at, ms (each)",
            ],
            rows,
        )
    )
    s.notes.append(
        "Goals: the fan-in at >= 80% of the independent rate, a chain link under 5 ms. The report member "
        "starts once its count of every member reaches zero, in the last member's finish; its own attempt reads "
        "every upstream member's return value (`job.upstream`). finished_at of a job, of its workflow and "
        "the created_at of a callback are all `now()` of the finishing transaction: its start, not its commit, "
        "so a delay after them includes the rest of that transaction."
    )
    after = [cb.after_workflow for _, cb in callbacks]
    bench.results["workflows"] = {
        "independent": independent,
        "fan_in": fan_in,
        "link_ms": link_ms,
        "callback_p50_ms": 1000 * percentile(after, 50),
        "callback_max_ms": 1000 * max(after),
        "members": n,
        "links": links,
    }
    s.data = {
        "independent": independent.to_json(),
        "fan_in": fan_in.to_json(),
        "paired_ratios": paired,
        "members_alone": alone.to_json(),
        "members_alone_paired_ratios": alone_paired,
        "fan_in_runs": [{k: v for k, v in d.items() if k != "callback"} for d in details],
        "chain": [
            {
                "ms_per_link": 1000 * c["span"] / links,
                "gap_p50_ms": 1000 * percentile(c["gaps"], 50),
                "gap_p99_ms": 1000 * percentile(c["gaps"], 99),
                "gap_max_ms": 1000 * max(c["gaps"]),
                "enqueue_s": c["enqueue_s"],
            }
            for c in chains
        ],
        "callbacks": [{"workflow": shape, **_cb_json(cb)} for shape, cb in callbacks],
    }


def _cb_json(cb: Callback) -> dict[str, float]:
    return {"after_workflow_ms": 1000 * cb.after_workflow, "after_member_ms": 1000 * cb.after_member,
            "created_ms": 1000 * cb.created}  # fmt: skip


def _reset() -> None:
    """Empty the queue's tables and the workflows' (a deadlock with a worker's statement: try again)."""
    for tries_left in range(4, -1, -1):
        try:
            with transaction.atomic():
                _exec(f"TRUNCATE {TABLES}")
            return
        except DatabaseError as error:
            if tries_left == 0 or getattr(error.__cause__, "sqlstate", None) != "40P01":
                raise


def _loaded(load: Callable[[], T]) -> T:
    """Run `load` in a transaction that analyzes what it wrote before it commits."""
    # A TRUNCATE keeps the statistics of the previous run's rows, and on them the claim can leave the
    # due index for a walk of the queue's rows until the plan guard or autovacuum analyzes again.
    # ANALYZE counts the rows its own transaction inserted: each repetition is planned on its own.
    with transaction.atomic():
        made = load()
        _exec("ANALYZE reliableq_job, reliableq_workflowedge, reliableq_workflowcount")
    return made


def _drained(bench: Bench, procs: Procs, n: int, what: str) -> None:
    """Wait until nothing is PENDING or RUNNING (a member's finish releases its dependents in its own statement)."""
    wait_for(lambda: bench.rq.unfinished() == 0, timeout=max(60.0, n / 20), interval=0.05, what=what, procs=procs)


def _warm_workflow(bench: Bench, procs: Procs, members: int) -> None:
    """A small fan-in with a callback through fresh workers, then nothing left of it."""
    import reliableq

    wf = reliableq.workflow(name="warm-up")
    first = [wf.add(KIND, {}, name=f"m{i}", queue=QUEUE) for i in range(members)]
    wf.add(KIND, {}, name=REPORT, after=first, queue=QUEUE)
    wf.on("success", KIND, {}, queue=QUEUE)
    wf.enqueue()
    _drained(bench, procs, members, "the warm-up workflow")
    _reset()


def _independent(bench: Bench, procs: Procs, n: int, run: str) -> float:
    """n independent jobs in one commit; gate; return jobs/s over the database's span."""
    _reset()
    began = time.monotonic()
    _loaded(lambda: bench.rq.load(n, KIND))
    _drained(bench, procs, n, f"{run}: {n} jobs to finish")
    wall = time.monotonic() - began
    o = bench.rq.outcome()
    bench.gate_outcome(run, o, n=n, attempts=n)
    bench.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
    rate = n / o.span
    bench.say(f"  {run}: {rate:,.0f} jobs/s")
    return rate


def _fan_in(bench: Bench, procs: Procs, n: int, run: str) -> tuple[float, dict[str, Any]]:
    """A workflow of n members (n - 1 and a report after them all) with a success callback; gate; jobs/s, details."""
    import reliableq

    _reset()
    wf = reliableq.workflow(name=run)
    members = [wf.add(KIND, {}, name=f"m{i:05d}", queue=QUEUE) for i in range(n - 1)]
    wf.add(KIND, {}, name=REPORT, after=members, queue=QUEUE)
    wf.on("success", KIND, {}, queue=QUEUE)
    began = time.monotonic()
    record = _loaded(wf.enqueue)
    enqueued = time.monotonic() - began
    _drained(bench, procs, n, f"{run}: {n} members and the callback to finish")
    wall = time.monotonic() - began
    everything = bench.rq.outcome()
    bench.gate_outcome(run, everything, n=n + 1, attempts=n + 1)  # the members, the report, the callback
    o = bench.rq.outcome("j.member_name IS NOT NULL")
    bench.gate.check(run, f"{n} members, all succeeded", o.total == o.succeeded == n)
    callback = _gate_workflow(bench, run, record.pk)
    bench.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
    report_wait, report_run = _one(
        """
        SELECT extract(epoch FROM a.started_at - (SELECT max(m.finished_at) FROM reliableq_job m
                                                   WHERE m.workflow_id = r.workflow_id AND m.member_name <> %s)),
               extract(epoch FROM a.finished_at - a.started_at)
          FROM reliableq_job r JOIN reliableq_attempt a ON a.job_id = r.id
         WHERE r.workflow_id = %s AND r.member_name = %s
        """,
        [REPORT, record.pk, REPORT],
    )
    rate = n / o.span
    # The members alone, up to the last one's finish: the fan-in's counting without the report's own attempt.
    alone = bench.rq.outcome("j.member_name IS NOT NULL AND j.member_name <> %s", [REPORT])
    bench.say(
        f"  {run}: {rate:,.0f} jobs/s (enqueue {enqueued:.2f} s; report started {1000 * float(report_wait):.1f} "
        f"ms after the last member, ran {1000 * float(report_run):.1f} ms; callback "
        f"+{1000 * callback.after_workflow:.1f} ms)"
    )
    detail = {
        "rate": rate,
        "members_rate": (n - 1) / alone.span,
        "enqueue_s": enqueued,
        "report_wait": float(report_wait),
        "report_run": float(report_run),
        "callback": callback,
    }
    return rate, detail


def _chain(bench: Bench, procs: Procs, links: int, run: str) -> dict[str, Any]:
    """A chain of `links` members with a success callback; gate; its span, gaps and attempts."""
    import reliableq

    _reset()
    wf = reliableq.workflow(name=run)
    previous = None
    for i in range(links):
        previous = wf.add(KIND, {}, name=f"link{i:05d}", after=[previous] if previous else [], queue=QUEUE)
    wf.on("success", KIND, {}, queue=QUEUE)
    began = time.monotonic()
    record = _loaded(wf.enqueue)
    enqueued = time.monotonic() - began
    # The workflow's status too: between two links the chain has nothing PENDING only inside a statement.
    wait_for(
        lambda: (
            _one("SELECT status FROM reliableq_workflow WHERE id = %s", [record.pk])[0] != "RUNNING"
            and bench.rq.unfinished() == 0
        ),
        timeout=max(60.0, links / 20),
        interval=0.05,
        what=f"{run}: {links} links and the callback to finish",
        procs=procs,
    )
    wall = time.monotonic() - began
    bench.gate_outcome(run, bench.rq.outcome(), n=links + 1, attempts=links + 1)
    o = bench.rq.outcome("j.member_name IS NOT NULL")
    bench.gate.check(run, f"{links} links, all succeeded", o.total == o.succeeded == links)
    callback = _gate_workflow(bench, run, record.pk)
    bench.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
    rows = _all(
        """
        SELECT extract(epoch FROM a.started_at), extract(epoch FROM a.finished_at)
          FROM reliableq_job j JOIN reliableq_attempt a ON a.job_id = j.id
         WHERE j.workflow_id = %s AND j.member_name IS NOT NULL ORDER BY j.member_name
        """,
        [record.pk],
    )
    starts = [float(r[0]) for r in rows]
    ends = [float(r[1]) for r in rows]
    gaps = [starts[k + 1] - ends[k] for k in range(len(rows) - 1)]
    bench.gate.check(run, f"each link started after the one before finished ({len(gaps)} gaps)", min(gaps) >= 0)
    span = o.span
    bench.say(
        f"  {run}: {1000 * span / links:.2f} ms per link, gap p50 {1000 * percentile(gaps, 50):.2f} ms, "
        f"p99 {1000 * percentile(gaps, 99):.2f} ms (enqueue {enqueued:.2f} s; callback "
        f"+{1000 * callback.after_workflow:.1f} ms)"
    )
    return {
        "span": span,
        "gaps": gaps,
        "runs": [e - b for b, e in zip(starts, ends, strict=True)],
        "enqueue_s": enqueued,
        "callback": callback,
    }


def _gate_workflow(bench: Bench, run: str, workflow_id: Any) -> Callback:
    """The workflow SUCCEEDED, nothing of it left waiting, one success callback run once; its delays."""
    status, finished, waiting, callbacks = _one(
        """
        SELECT w.status, w.finished_at IS NOT NULL,
               (SELECT count(*) FROM reliableq_job j WHERE j.workflow_id = w.id AND j.status = 'WAITING'),
               (SELECT count(*) FROM reliableq_job j WHERE j.workflow_id = w.id AND j.member_name IS NULL
                                                      AND j.status = 'SUCCEEDED')
          FROM reliableq_workflow w WHERE w.id = %s
        """,
        [workflow_id],
    )
    bench.gate.check(
        run, f"the workflow SUCCEEDED with its finished_at set ({status})", status == "SUCCEEDED" and finished
    )
    bench.gate.check(run, f"no member left WAITING ({waiting})", waiting == 0)
    bench.gate.check(run, f"one success callback, succeeded ({callbacks})", callbacks == 1)
    after_workflow, after_member, created = _one(
        """
        SELECT extract(epoch FROM a.started_at - w.finished_at),
               extract(epoch FROM a.started_at - (SELECT max(m.finished_at) FROM reliableq_job m
                                                   WHERE m.workflow_id = w.id AND m.member_name IS NOT NULL)),
               extract(epoch FROM c.created_at - w.finished_at)
          FROM reliableq_workflow w
          JOIN reliableq_job c ON c.workflow_id = w.id AND c.member_name IS NULL
          JOIN reliableq_attempt a ON a.job_id = c.id AND a.number = 1
         WHERE w.id = %s
        """,
        [workflow_id],
    )
    bench.gate.check(run, "the callback started after the workflow finished", float(after_workflow) >= 0)
    return Callback(after_workflow=float(after_workflow), after_member=float(after_member), created=float(created))
