"""Recovery after SIGKILL: a real worker dies holding a job; how long until another worker starts it again."""

from __future__ import annotations

import os
import random
import signal
import time

from django.db import transaction

from ..core import Procs, wait_for
from ..systems import _all, _exec, _one
from .context import Bench
from .helpers import Section, env, mean, table
from .registry import scenario


@scenario("recovery", title="Recovery after SIGKILL of a real worker", knobs=("leases", "recovery_trials"))
def recovery(bench: Bench, s: Section) -> None:
    p = bench.p
    s.intro = (
        "For each lease length, worker A (`runworker --lease-seconds L`, its own queue) claims a job that "
        "would run for minutes; a rescuer worker B (default POLL_SECONDS=1) serves every queue, and a worker M "
        "started first holds the maintenance lease (the elected leader rescues expired leases for the fleet). "
        "A is killed with SIGKILL at a random moment in its lease cycle. Recovery is from the kill (database "
        "clock, read just before the signal) to the start of attempt 2 on B (database clock). Last, one more "
        "A with a 2 s lease is killed together with the leader M: B must first take the maintenance lease over."
    )
    bench.rq.reset()
    samples, with_leader = _kill_and_recover(bench)
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
    from reliableq.conf import reliableq_settings
    from reliableq.worker.maintenance import lead_seconds

    # Killed with the leader: the job's lease and the leader's run out, B bids every third of the
    # latter, then rescues at once. M and B run with the settings' lease and poll, as this process reads them.
    leader_lease = lead_seconds(float(reliableq_settings.LEASE_SECONDS), float(reliableq_settings.POLL_SECONDS))
    bound = max(WITH_LEADER_LEASE, leader_lease + leader_lease / 3) + 1.0
    rows.append(
        [
            f"{WITH_LEADER_LEASE:g} s, killed with the leader",
            1,
            f"{with_leader:.2f}",
            f"{with_leader:.2f}",
            f"{bound:g} (the leader's lease {leader_lease:g} s + a third + 1 s)",
            "met" if with_leader <= bound else f"missed by {with_leader - bound:.2f} s",
        ]
    )
    met &= with_leader <= bound
    s.tables.append(table(["lease", "kills", "mean recovery s", "worst s", "target", ""], rows))
    s.notes.append(
        "Peers: neither has an equivalent to measure. procrastinate marks a crashed worker's job "
        "'doing' until someone retries stalled jobs (a call the application schedules itself); "
        "django-tasks-db leaves it RUNNING. Neither re-runs it by itself."
    )
    s.notes.append(
        "Recovery = what was left of the lease at the kill (between 2/3 L and L, the heartbeat renews "
        "every L/3) + up to one POLL_SECONDS for the leader's next rescue. When the leader dies too, the "
        "maintenance lease (three POLL_SECONDS, at least 2 s, at most LEASE_SECONDS) must run out first; "
        "it is kept that short so that a leader dying with its jobs does not hold their rescue back."
    )
    bench.results["recovery"] = (met, {k: max(v) for k, v in samples.items()})
    s.data = {f"{k:g}": v for k, v in samples.items()}
    from .. import report

    s.plots.append(report.plot_recovery(bench.out, samples))


WITH_LEADER_LEASE = 2.0
WITH_LEADER = (WITH_LEADER_LEASE, -1)  # the trial killed together with the leader, apart from the others


def _kill_and_recover(bench: Bench) -> tuple[dict[float, list[float]], float]:
    """SIGKILL each worker A at a random moment of its lease; return seconds to attempt 2 on B, per lease,
    and for the last A, killed together with the maintenance leader."""
    import reliableq

    rng = random.Random(7)  # the same kill order and moments on every run
    trials = [(lease, i) for lease in bench.p.leases for i in range(bench.p.recovery_trials)]
    samples: dict[float, list[float]] = {lease: [] for lease in bench.p.leases}
    began = time.monotonic()
    with Procs(bench.logs) as procs:
        _exec("DELETE FROM reliableq_leader")  # a row left over by an earlier scenario's workers
        leader = procs.manage(
            "rec-M", ["runworker", "--queues", "rec-leader", "--worker-id", "M"], env=env(RELIABLEQ_LOG_LEVEL="WARNING")
        )
        wait_for(
            lambda: _one("SELECT count(*) FROM reliableq_leader WHERE holder = 'M'")[0] == 1,
            timeout=60,
            what="worker M to take the maintenance lease",
            procs=procs,
        )
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
        jobs: dict[tuple[float, int], object] = {}
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
        last = procs.manage(
            "rec-A-with-leader",
            ["runworker", "--queues", "rec-with-leader", "--concurrency", "1", "--lease-seconds",
             f"{WITH_LEADER_LEASE:g}", "--worker-id", "A-with-leader"],
            env=env(RELIABLEQ_LOG_LEVEL="WARNING"),
        )  # fmt: skip
        with transaction.atomic():
            held = reliableq.enqueue("bench.hold", {"seconds": 600, "then": 0}, queue="rec-with-leader").id
        jobs[WITH_LEADER] = held
        wait_for(
            lambda: _one("SELECT count(*) FROM reliableq_job WHERE id = %s AND status = 'RUNNING'", [held])[0] == 1,
            timeout=60,
            what="the last worker A to claim its job",
            procs=procs,
        )
        queues = ",".join([*(f"rec-{lease:g}-{i}" for lease, i in trials), "rec-with-leader"])
        procs.manage(
            "rec-B",
            ["runworker", "--queues", queues, "--concurrency", "8", "--worker-id", "B"],
            env=env(RELIABLEQ_LOG_LEVEL="WARNING"),
        )
        time.sleep(3.0)  # B is up and idle, polling
        kills: dict[tuple[float, int], float] = {}
        order = sorted(trials, key=lambda t: rng.random())
        for trial in order:
            lease, _ = trial
            time.sleep(rng.uniform(0, lease / 3))  # anywhere in the heartbeat cycle
            (kills[trial],) = _one("SELECT extract(epoch FROM clock_timestamp())")
            os.kill(a_procs[trial].pid, signal.SIGKILL)
            a_procs[trial].wait()
        wait_for(
            lambda: (
                _one(
                    "SELECT count(*) FROM reliableq_attempt WHERE job_id = ANY(%s::uuid[]) AND number = 2",
                    [[str(jobs[t]) for t in trials]],
                )[0]
                == len(trials)
            ),
            timeout=max(bench.p.leases) * 3 + 30,
            what="every job of the A workers running again",
        )
        (kills[WITH_LEADER],) = _one("SELECT extract(epoch FROM clock_timestamp())")
        for proc in (leader, last):
            os.kill(proc.pid, signal.SIGKILL)
        leader.wait()
        last.wait()
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
        with_leader = 0.0
        for trial, job_id in jobs.items():
            run = (
                "recovery with the leader killed too"
                if trial == WITH_LEADER
                else f"recovery lease {trial[0]:g}s trial {trial[1] + 1}"
            )
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
            if trial == WITH_LEADER:
                with_leader = took
            else:
                samples[trial[0]].append(took)
            bench.say(f"  {run}: recovered in {took:.2f} s")
    return samples, with_leader
