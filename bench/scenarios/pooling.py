"""Execution throughput through PgBouncer in transaction mode, beside the same fleet connected directly."""

from __future__ import annotations

from typing import Any

from testproject import dburl
from testproject.pgbouncer import SERVER_ROLE, PgBouncer, ensure_server_role
from testproject.serverconns import ServerConnections

from ..core import ratio
from .context import Bench
from .helpers import Section, fmt_ratio, named_url, table
from .registry import scenario


@scenario("pooler", title="Through PgBouncer: throughput on a pool of server connections", knobs=("reps", "pooler"))
def pooler(bench: Bench, s: Section) -> None:
    processes, concurrency, pool = bench.p.pooler
    s.intro = (
        f"No-op jobs, {processes} worker processes x {concurrency}, measured as in the throughput section: "
        f"connected directly, then through Debian's PgBouncer in transaction mode with default_pool_size={pool} "
        "on the same server, LISTEN on a direct connection (`LISTEN_DATABASE`). Server connections are "
        "PostgreSQL's count (pg_stat_activity, sampled every 0.2 s during the measured runs): the direct "
        "fleet's by its application name, PgBouncer's by the login role it uses."
    )
    tag = "pool-direct"
    url = named_url(bench.database_url, tag)
    direct_conns = ServerConnections(bench.database_url, {"fleet": ("application_name = %s", (tag,))})
    bench.say(f"pooler: {processes} x {concurrency} direct")
    direct = bench.sweep(
        bench.rq,
        processes=processes,
        concurrency=concurrency,
        job="noop",
        tag=tag,
        guess=800,
        env={"DATABASE_URL": url},
        around_reps=direct_conns.sampling,
    )
    ensure_server_role(bench.database_url)
    tag = "pool-pgbouncer"
    pooled_conns = ServerConnections(
        bench.database_url,
        {"fleet": ("usename = %s", (SERVER_ROLE,)), "listen": ("application_name = %s", (f"{tag}-listen",))},
    )
    with PgBouncer.start(dburl.parse(bench.database_url), pool_size=pool, server_user=SERVER_ROLE) as bouncer:
        bench.say(f"pooler: {processes} x {concurrency} through PgBouncer, pool size {pool}")
        pooled = bench.sweep(
            bench.rq,
            processes=processes,
            concurrency=concurrency,
            job="noop",
            tag=tag,
            guess=800,
            env={
                "DATABASE_URL": bouncer.url_for(bouncer.dbname, application_name=tag),
                "LISTEN_DATABASE_URL": named_url(bench.database_url, f"{tag}-listen"),
                "RELIABLEQ_LISTEN_DATABASE": "direct",
            },
            around_reps=pooled_conns.sampling,
        )
    bench.gate.check(
        f"{tag} {processes} x {concurrency}",
        f"PgBouncer held at most {pool} server connections ({pooled_conns.peaks['fleet']})",
        0 < pooled_conns.peaks["fleet"] <= pool,
    )
    config = f"{processes} x {concurrency}"
    rows: list[list[Any]] = [
        ["direct", config, direct.text(), direct_conns.peaks["fleet"], "1.00x"],
        [
            f"PgBouncer (transaction, pool {pool}) + direct LISTEN",
            config,
            pooled.text(),
            f"{pooled_conns.peaks['fleet']} + {pooled_conns.peaks['listen']} LISTEN",
            fmt_ratio(ratio(pooled.median, direct.median)),
        ],
    ]
    s.tables.append(
        table(["path", "processes x concurrency", "jobs/s", "server connections (peak)", "vs direct"], rows)
    )
    s.notes.append(
        "A transaction pooler adds a hop and a wait for a free server connection to every statement; "
        "what it buys is the server connections: a fleet's count stays at the pool size however many "
        "workers connect."
    )
    s.data = {
        "config": {"processes": processes, "concurrency": concurrency, "pool_size": pool},
        "direct": {**direct.to_json(), "server_connections": direct_conns.peaks["fleet"]},
        "pgbouncer": {
            **pooled.to_json(),
            "server_connections": pooled_conns.peaks["fleet"],
            "listen_connections": pooled_conns.peaks["listen"],
        },
    }
