"""Recovery after SIGKILL: a real worker dies holding a job; how long until another worker starts it again."""

from __future__ import annotations

import os
import random
import signal
import time

from django.db import transaction

from ..core import Procs, wait_for
from ..systems import _all, _one
from .context import Bench
from .helpers import Section, env, mean, table
from .registry import scenario


@scenario("recovery", title="Recovery after SIGKILL of a real worker", knobs=("leases", "recovery_trials"))
def recovery(bench: Bench, s: Section) -> None:
    p = bench.p
    s.intro = (
        "For each lease length, worker A (`runworker --lease-seconds L`, its own queue) claims a job that "
        "would run for minutes; a rescuer worker B (default POLL_SECONDS=1) serves every queue. A is "
        "killed with SIGKILL at a random moment in its lease cycle. Recovery is from the kill (database "
        "clock, read just before the signal) to the start of attempt 2 on B (database clock)."
    )
    bench.rq.reset()
    samples = _kill_and_recover(bench)
    bench.rq.reset()
    rows = []
    met = True
    for lease in p.leases:
        v = samples[lease]
        worst = max(v)
        ok = worst <= lease + 1.0
        met &= ok
        rows.append(
            [
                f"{lease:g} s",
                len(v),
                f"{mean(v):.2f}",
                f"{worst:.2f}",
                f"{lease + 1:g}",
                "met" if ok else f"missed by {worst - lease - 1:.2f} s",
            ]
        )
    s.tables.append(table(["lease", "kills", "mean recovery s", "worst s", "target (lease + 1 s)", ""], rows))
    s.notes.append(
        "Peers: neither has an equivalent to measure. procrastinate marks a crashed worker's job "
        "'doing' until someone retries stalled jobs (a call the application schedules itself); "
        "django-tasks-db leaves it RUNNING. Neither re-runs it by itself."
    )
    s.notes.append(
        "Recovery = what was left of the lease at the kill (between 2/3 L and L, the heartbeat renews "
        "every L/3) + up to one POLL_SECONDS for the rescuer's next claim."
    )
    bench.results["recovery"] = (met, {k: max(v) for k, v in samples.items()})
    s.data = {f"{k:g}": v for k, v in samples.items()}
    from .. import report

    s.plots.append(report.plot_recovery(bench.out, samples))


def _kill_and_recover(bench: Bench) -> dict[float, list[float]]:
    """SIGKILL each worker A at a random moment of its lease; return seconds to attempt 2 on B, per lease."""
    import reliableq

    rng = random.Random(7)  # the same kill order and moments on every run
    trials = [(lease, i) for lease in bench.p.leases for i in range(bench.p.recovery_trials)]
    samples: dict[float, list[float]] = {lease: [] for lease in bench.p.leases}
    began = time.monotonic()
    with Procs(bench.logs) as procs:
        a_procs = {}
        for lease, i in trials:
            queue = f"rec-{lease:g}-{i}"
            a_procs[(lease, i)] = procs.manage(
                f"rec-A-{lease:g}-{i}",
                [
                    "runworker",
                    "--queues",
                    queue,
                    "--concurrency",
                    "1",
                    "--lease-seconds",
                    f"{lease:g}",
                    "--worker-id",
                    f"A-{lease:g}-{i}",
                ],
                env=env(RELIABLEQ_LOG_LEVEL="WARNING"),
            )
        jobs = {}
        for lease, i in trials:
            with transaction.atomic():
                jobs[(lease, i)] = reliableq.enqueue(
                    "bench.hold", {"seconds": 600, "then": 0}, queue=f"rec-{lease:g}-{i}"
                ).id
        wait_for(
            lambda: (
                _one("SELECT count(*) FROM reliableq_job WHERE kind = 'bench.hold' AND status = 'RUNNING'")[0]
                == len(trials)
            ),
            timeout=60,
            what="every worker A to claim its job",
            procs=procs,
        )
        queues = ",".join(f"rec-{lease:g}-{i}" for lease, i in trials)
        procs.manage(
            "rec-B",
            ["runworker", "--queues", queues, "--concurrency", "8", "--worker-id", "B"],
            env=env(RELIABLEQ_LOG_LEVEL="WARNING"),
        )
        time.sleep(3.0)  # B is up and idle, polling
        kills = {}
        order = sorted(trials, key=lambda t: rng.random())
        for trial in order:
            lease, _ = trial
            time.sleep(rng.uniform(0, lease / 3))  # anywhere in the heartbeat cycle
            (kills[trial],) = _one("SELECT extract(epoch FROM clock_timestamp())")
            os.kill(a_procs[trial].pid, signal.SIGKILL)
            a_procs[trial].wait()
        ids = [str(j) for j in jobs.values()]
        wait_for(
            lambda: (
                _one("SELECT count(*) FROM reliableq_job WHERE id = ANY(%s::uuid[]) AND status = 'SUCCEEDED'", [ids])[0]
                == len(ids)
            ),
            timeout=max(bench.p.leases) * 3 + 30,
            what="every job recovered",
        )
        wall = time.monotonic() - began
        for trial, job_id in jobs.items():
            run = f"recovery lease {trial[0]:g}s trial {trial[1] + 1}"
            rows = _all(
                "SELECT number, outcome, worker_id, extract(epoch FROM started_at) FROM reliableq_attempt "
                "WHERE job_id = %s ORDER BY number",
                [job_id],
            )
            seen = [(r[0], r[1], r[2][:1]) for r in rows]
            bench.gate.check(
                run,
                "two attempts: LEASE_EXPIRED on A, SUCCEEDED on B",
                seen == [(1, "LEASE_EXPIRED", "A"), (2, "SUCCEEDED", "B")],
            )
            took = float(rows[1][3]) - float(kills[trial])
            bench.gate.window(run, [took], wall, "recovery time")
            samples[trial[0]].append(took)
            bench.say(f"  {run}: recovered in {took:.2f} s")
    return samples
