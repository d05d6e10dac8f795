"""Many hosts, simulated: fleets of 1 to 8 worker processes; throughput, server connections, and the
maintenance traffic that the elected leader keeps flat however many workers there are."""

from __future__ import annotations

import time

from bench.serverconns import ServerConnections

from .. import statements
from ..core import Procs, wait_for
from ..systems import _exec, _one
from .context import Bench
from .helpers import Section, named_url, table
from .registry import scenario


@scenario(
    "fleet",
    title="A fleet of hosts: throughput, server connections and maintenance as it grows",
    knobs=("reps", "seconds", "fleets", "fleet_slots", "maintenance_seconds"),
)
def fleet(bench: Bench, s: Section) -> None:
    p = bench.p
    c = p.fleet_slots
    s.intro = (
        f"Worker processes at concurrency {c}, as separate hosts would run them (each its own process and "
        "connections; one machine here). For each fleet: no-op throughput as in the throughput section, with "
        "PostgreSQL's count of the fleet's connections (pg_stat_activity by application name, every 0.2 s) "
        "while busy; then a fresh fleet of the same size with a cron kind and one-second maintenance intervals, "
        f"idle for {p.maintenance_seconds:g} s, while pg_stat_statements counts the statements of each duty "
        "the database ran (see bench/statements.py). Rescue, cron, retention and the plan guard are the "
        "elected leader's alone; lease tries are every worker's bid for the lease, every third of the maintenance "
        "lease (three POLL_SECONDS, at least 2 s, at most LEASE_SECONDS)."
    )
    rows = []
    data = {}
    rates: dict[int, dict[str, float]] = {}
    for n in p.fleets:
        tag = f"fleet-{n}"
        busy = ServerConnections(bench.database_url, {"fleet": ("application_name = %s", (tag,))})
        bench.say(f"fleet: {n} x {c} throughput")
        tp = bench.sweep(
            bench.rq,
            processes=n,
            concurrency=c,
            job="noop",
            tag=tag,
            guess=800,
            env={"DATABASE_URL": named_url(bench.database_url, tag)},
            around_reps=busy.sampling,
        )
        bench.say(f"fleet: {n} x {c} maintenance for {p.maintenance_seconds:g} s")
        calls, seconds, idle = maintenance_window(bench, n, c, f"{tag}-m")
        rates[n] = {duty: count / seconds for duty, count in calls.items()}
        bench.gate.check(f"{tag}-m", f"the leader rescued in the window ({calls['rescue']} calls)", calls["rescue"] > 0)
        rows.append(
            [
                f"{n} x {c}",
                tp.text(),
                busy.peaks["fleet"],
                idle,
                f"{busy.peaks['fleet'] / n:.1f}",
                *(f"{rates[n][duty]:.2f}" for duty in statements.DUTIES),
            ]
        )
        data[n] = {
            "throughput": tp.to_json(),
            "server_connections_busy": busy.peaks["fleet"],
            "server_connections_idle": idle,
            "window_seconds": seconds,
            "calls": calls,
        }
    first, last = min(p.fleets), max(p.fleets)
    leader = {n: sum(rates[n][d] for d in statements.MAINTENANCE) for n in rates}
    bench.gate.check(
        "fleet",
        f"maintenance flat: {leader[last]:.2f} statements/s at {last} processes vs {leader[first]:.2f} at {first}",
        leader[last] <= 1.5 * leader[first] + 1.0,
    )
    header = [
        "processes x concurrency",
        "jobs/s",
        "server connections busy (peak)",
        "idle",
        "per process (busy)",
        *(f"{duty} /s" for duty in statements.DUTIES),
    ]
    s.tables.append(table(header, rows))
    s.notes.append(
        "The leader's statements per second (rescue + cron + retention + plan guard): "
        + ", ".join(f"{leader[n]:.2f} at {n}" for n in sorted(leader))
        + ". Lease tries grow with the fleet by design: each worker bids every third of the maintenance lease "
        "(three POLL_SECONDS, at least 2 s, at most LEASE_SECONDS: every second here and by default), one "
        "small upsert on one row."
    )
    s.data = {"concurrency": c, "by_processes": data, "leader_statements_per_second": leader}


def maintenance_window(bench: Bench, processes: int, concurrency: int, tag: str) -> tuple[dict[str, int], float, int]:
    """Run an idle fleet with cron and short maintenance intervals; count each duty's statements in a window.

    Returns (calls per duty, the window's seconds, the fleet's server connections at their peak).
    """
    bench.rq.reset()
    _exec("DELETE FROM reliableq_leader")
    conns = ServerConnections(bench.database_url, {"fleet": ("application_name = %s", (tag,))})
    with statements.tracking(bench.database_url), Procs(bench.logs) as procs:
        bench.rq.start_workers(
            procs,
            processes=processes,
            concurrency=concurrency,
            tag=tag,
            DATABASE_URL=named_url(bench.database_url, tag),
            # Short intervals, so that a window of seconds holds many rounds of each duty: rescue every
            # POLL_SECONDS (1 s), cron and retention every second, the lease (3 s) tried every second.
            RELIABLEQ_TEST_CRON="1",  # testproject's every-second cron kind: something to schedule
            RELIABLEQ_SCHEDULE_SECONDS="1",
            RELIABLEQ_RETENTION_INTERVAL_SECONDS="1",
            RELIABLEQ_LEASE_SECONDS="3",
        )
        wait_for(
            lambda: listening(tag) == processes and leaders() == 1,
            timeout=120,
            interval=0.1,
            what=f"{tag}: {processes} workers listening and a maintenance leader",
            procs=procs,
        )
        statements.reset(bench.database_url)
        began = time.monotonic()
        # The window's length is the measure (statements per second), not a wait for a condition.
        while time.monotonic() - began < bench.p.maintenance_seconds:
            procs.check_alive()
            conns.sample()
            time.sleep(0.1)
        calls = statements.calls(bench.database_url)
        seconds = time.monotonic() - began
        conns.close()
    bench.rq.reset()  # the cron kind's jobs (queue default, which the bench's workers do not serve)
    return calls, seconds, conns.peaks["fleet"]


def listening(tag: str) -> int:
    return int(
        _one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN%%'",
            [tag],
        )[0]
    )


def leaders() -> int:
    return int(_one("SELECT count(*) FROM reliableq_leader WHERE expires_at > now()")[0])
