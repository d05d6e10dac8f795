"""Execution throughput through PgBouncer in transaction mode, beside the same fleet connected directly."""

from __future__ import annotations

import statistics
from typing import Any

from bench.pgbouncer import SERVER_ROLE, PgBouncer, ensure_server_role
from bench.serverconns import ServerConnections
from testproject import dburl

from ..core import ratio
from .context import Bench
from .helpers import Section, fmt_ratio, named_url, table
from .registry import scenario


@scenario("pooler", title="Through PgBouncer: throughput on a pool of server connections", knobs=("reps", "pooler"))
def pooler(bench: Bench, s: Section) -> None:
    processes, concurrency, pool = bench.p.pooler
    s.intro = (
        f"No-op jobs, {processes} worker processes x {concurrency}, measured as in the throughput section: "
        f"connected directly, and through Debian's PgBouncer in transaction mode with default_pool_size={pool} "
        "on the same server, LISTEN on a direct connection (`LISTEN_DATABASE`). The two alternate, a fresh "
        "fleet for each repetition (direct, pooled, direct, ...), so that each pair shares the machine's "
        "moment; the ratio's range is that of the pairs. Server connections are PostgreSQL's count "
        "(pg_stat_activity, sampled every 0.2 s during the measured runs): the direct fleet's by its "
        "application name, PgBouncer's by the login role it logs in with."
    )
    config = f"{processes} x {concurrency}"
    direct = bench.repetitions(system="ReliableQ direct", job="noop", workers=config, run="pool-direct")
    pooled = bench.repetitions(system="ReliableQ via PgBouncer", job="noop", workers=config, run="pool-pgbouncer")
    direct_conns = ServerConnections(bench.database_url, {"fleet": ("application_name = %s", ("pool-direct",))})
    pooled_conns = ServerConnections(
        bench.database_url,
        {
            "fleet": ("usename = %s", (SERVER_ROLE,)),
            "listen": ("application_name = %s", ("pool-pgbouncer-listen",)),
        },
    )
    ensure_server_role(bench.database_url)
    with PgBouncer.start(dburl.parse(bench.database_url), pool_size=pool, server_user=SERVER_ROLE) as bouncer:
        pooled_env = {
            "DATABASE_URL": bouncer.url_for(bouncer.dbname, application_name="pool-pgbouncer"),
            "LISTEN_DATABASE_URL": named_url(bench.database_url, "pool-pgbouncer-listen"),
            "RELIABLEQ_LISTEN_DATABASE": "direct",
        }
        for rep in range(bench.p.reps):
            bench.say(f"pooler: {config} direct, then through PgBouncer (pool size {pool}), pair {rep + 1}")
            for tag, into, env, conns in (
                ("pool-direct", direct, {"DATABASE_URL": named_url(bench.database_url, "pool-direct")}, direct_conns),
                ("pool-pgbouncer", pooled, pooled_env, pooled_conns),
            ):
                bench.sweep(
                    bench.rq,
                    processes=processes,
                    concurrency=concurrency,
                    job="noop",
                    tag=tag,
                    guess=800,
                    reps=1,
                    env=env,
                    around_reps=conns.sampling,
                    into=into,
                )
    bench.gate.check(
        f"pool-pgbouncer {config}",
        f"PgBouncer held at most {pool} server connections ({pooled_conns.peaks['fleet']})",
        0 < pooled_conns.peaks["fleet"] <= pool,
    )
    pairs = [ratio(b, a) for a, b in zip(direct.values, pooled.values, strict=True)]
    spread = f" ({min(pairs):.2f}–{max(pairs):.2f})" if len(pairs) > 1 else ""
    rows: list[list[Any]] = [
        ["direct", config, direct.text(), direct_conns.peaks["fleet"], "1.00x"],
        [
            f"PgBouncer (transaction, pool {pool}) + direct LISTEN",
            config,
            pooled.text(),
            f"{pooled_conns.peaks['fleet']} + {pooled_conns.peaks['listen']} LISTEN",
            fmt_ratio(statistics.median(pairs)) + spread,
        ],
    ]
    s.tables.append(
        table(["path", "processes x concurrency", "jobs/s", "server connections (peak)", "vs direct"], rows)
    )
    s.notes.append(
        "A transaction pooler adds a hop, and a wait for a free server connection, to every statement; "
        "what it buys is the server connections: their count stays at the pool size however many worker "
        "threads and processes connect."
    )
    s.data = {
        "config": {"processes": processes, "concurrency": concurrency, "pool_size": pool},
        "direct": {**direct.to_json(), "server_connections": direct_conns.peaks["fleet"]},
        "pgbouncer": {
            **pooled.to_json(),
            "server_connections": pooled_conns.peaks["fleet"],
            "listen_connections": pooled_conns.peaks["listen"],
        },
        "pair_ratios": pairs,
    }
