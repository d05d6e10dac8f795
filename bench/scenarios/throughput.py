"""Execution throughput of no-op jobs: one worker by concurrency, a fleet by processes, the peers pair by pair."""

from __future__ import annotations

from ..core import Summary, ratio
from ..systems import TasksDB
from .context import Bench
from .helpers import Section, fmt_ratio, table
from .registry import scenario


@scenario(
    "throughput",
    title="Execution throughput: no-op jobs",
    knobs=("reps", "seconds", "min_jobs", "concurrency", "processes", "fleet", "peers"),
)
def throughput(bench: Bench, s: Section) -> None:
    p = bench.p
    fp, fc = p.fleet
    s.intro = (
        "No-op jobs (the cost of the queue itself). Each run loads N due jobs in one commit into idle, "
        "warmed-up workers; the rate is N over the span the database recorded from the first start to "
        "the last finish. Top: one worker process against its concurrency. Then worker processes at "
        f"concurrency {fc}. The peers run the same no-op at the fleet configuration ({fp} x {fc}) and at "
        f"1 x {fc}."
    )
    by_conc = {}
    for c in p.concurrency:
        bench.say(f"throughput: ReliableQ 1 x {c}")
        by_conc[c] = bench.sweep(bench.rq, processes=1, concurrency=c, job="noop", tag=f"tp-c{c}", guess=600)
    by_proc = {}
    for pr in p.processes:
        if pr == 1 and fc in by_conc:
            by_proc[pr] = by_conc[fc]
            continue
        bench.say(f"throughput: ReliableQ {pr} x {fc}")
        by_proc[pr] = bench.sweep(bench.rq, processes=pr, concurrency=fc, job="noop", tag=f"tp-p{pr}", guess=800)
    fleet = by_proc.get(fp) or bench.sweep(
        bench.rq, processes=fp, concurrency=fc, job="noop", tag="tp-fleet", guess=800
    )
    peers: dict[str, dict[str, Summary]] = {}
    for peer in bench.peers:
        peers[peer.key] = {}
        for pr in sorted({1, fp}):
            bench.say(f"throughput: {peer.name} at {pr} x {fc}")
            peers[peer.key][f"{pr}x{fc}"] = bench.sweep(
                peer, processes=pr, concurrency=fc, job="noop", tag=f"tp-{peer.key}-{pr}", guess=300
            )
    rows = [[f"1 x {c}", by_conc[c].text()] for c in p.concurrency]
    s.tables.append(
        "**One worker process, by concurrency**\n\n" + table(["processes x concurrency", "ReliableQ jobs/s"], rows)
    )
    rows = [[f"{pr} x {fc}", by_proc[pr].text()] for pr in p.processes]
    s.tables.append(
        f"**Worker processes at concurrency {fc}**\n\n" + table(["processes x concurrency", "ReliableQ jobs/s"], rows)
    )
    rows = []
    for pr in sorted({1, fp}):
        ours = by_proc.get(pr) or (by_conc.get(fc) if pr == 1 else fleet)
        if ours is None:
            raise ValueError(f"Profile {p.name!r} measures no 1 x {fc} run to set beside the peers' 1 x {fc}.")
        cells = [f"{pr} x {fc}", ours.text()]
        for peer in bench.peers:
            got = peers[peer.key][f"{pr}x{fc}"]
            cells += [f"{got.text()} ({peer.describe(pr, fc)})", fmt_ratio(ratio(ours.median, got.median))]
        rows.append(cells)
    header = ["ReliableQ config", "ReliableQ jobs/s"]
    for peer in bench.peers:
        header += [f"{peer.name} jobs/s (its workers)", f"ReliableQ / {peer.name}"]
    s.tables.append("**Side by side with the peers, pair by pair**\n\n" + table(header, rows))
    if any(isinstance(peer, TasksDB) for peer in bench.peers):
        s.notes.append(
            "django-tasks-db's `db_worker` runs one task at a time, so it gets one process per "
            f"ReliableQ slot (capped at {TasksDB.MAX_PROCESSES}), polling every 0.1 s when idle. "
            "procrastinate runs the same processes x concurrency as ReliableQ."
        )
    bench.results["fleet"] = fleet
    bench.results["fleet_peers"] = {k: v[f"{fp}x{fc}"] for k, v in peers.items()}
    s.data = {
        "by_concurrency": {c: v.to_json() for c, v in by_conc.items()},
        "by_processes": {pr: v.to_json() for pr, v in by_proc.items()},
        "peers": {k: {cfg: v.to_json() for cfg, v in d.items()} for k, d in peers.items()},
    }
    bench.results["throughput"] = (by_conc, by_proc, peers)
