"""I/O-bound jobs: a 50 ms handler against the ideal of concurrency / 50 ms, with the peers."""

from __future__ import annotations

from ..core import Summary, ratio
from ..systems import System, TasksDB
from .context import Bench
from .helpers import Section, fmt_pct, fmt_ratio, table
from .registry import scenario

# Seconds per job: bench.jobs.SLEEP_SECONDS, not imported because bench.jobs needs Django set up and the
# registry is read before that (by `--only`).
SLEEP = 0.05


@scenario(
    "io",
    title=f"I/O-bound jobs: a {SLEEP * 1000:.0f} ms handler",
    knobs=("reps", "seconds", "min_jobs", "io_concurrency", "peers"),
)
def io(bench: Bench, s: Section) -> None:
    s.intro = (
        f"Each job sleeps {SLEEP * 1000:.0f} ms (a network call). The ideal for concurrency c is "
        f"c / {SLEEP:g} s jobs/s. One worker process for ReliableQ and procrastinate."
    )
    ours: dict[int, Summary] = {}
    peers: dict[str, dict[int, Summary]] = {peer.key: {} for peer in bench.peers}
    for c in bench.p.io_concurrency:
        ideal = c / SLEEP
        bench.say(f"io: ReliableQ 1 x {c}")
        ours[c] = bench.sweep(bench.rq, processes=1, concurrency=c, job="sleep", tag=f"io-c{c}", guess=0.8 * ideal)
        for peer in bench.peers:
            bench.say(f"io: {peer.name} at 1 x {c}")
            peers[peer.key][c] = bench.sweep(
                peer,
                processes=1,
                concurrency=c,
                job="sleep",
                tag=f"io-{peer.key}-{c}",
                guess=0.5 * min(ideal, peer_ideal(peer, c)),
            )
    header = ["concurrency", "ideal jobs/s", "ReliableQ jobs/s", "of ideal"]
    for peer in bench.peers:
        header += [f"{peer.name} jobs/s (its workers)", f"ReliableQ / {peer.name}"]
    rows = []
    for c in bench.p.io_concurrency:
        ideal = c / SLEEP
        cells = [c, f"{ideal:,.0f}", ours[c].text(), _of_ideal(ours[c], ideal)]
        for peer in bench.peers:
            got = peers[peer.key][c]
            cells += [f"{got.text()} ({peer.describe(1, c)})", fmt_ratio(ratio(ours[c].median, got.median))]
        rows.append(cells)
    s.tables.append(table(header, rows))
    if any(isinstance(peer, TasksDB) for peer in bench.peers):
        s.notes.append(
            f"django-tasks-db runs one process per slot, capped at {TasksDB.MAX_PROCESSES} processes "
            "(each a full Django process; more would not fit this machine), so at high concurrency it "
            "has fewer slots than the others."
        )
    s.data = {
        "reliableq": {c: v.to_json() for c, v in ours.items()},
        "peers": {k: {c: v.to_json() for c, v in d.items()} for k, d in peers.items()},
    }
    from .. import report

    s.plots.append(report.plot_io(bench.out, ours, peers, SLEEP))


def peer_ideal(peer: System, c: int) -> float:
    """A peer's own ideal: django-tasks-db gets at most MAX_PROCESSES slots, whatever c is."""
    return (TasksDB.MAX_PROCESSES if isinstance(peer, TasksDB) else c) / SLEEP


def _of_ideal(rates: Summary, ideal: float) -> str:
    # The median's fraction of the ideal, with every repetition's range beside it (one repetition: no range).
    text = fmt_pct(rates.median / ideal)
    return text if len(rates.values) < 2 else f"{text} ({fmt_pct(rates.low / ideal)}–{fmt_pct(rates.high / ideal)})"
