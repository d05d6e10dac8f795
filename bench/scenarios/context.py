"""Bench: what every scenario is handed, and the throughput run most of them share."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from ..core import Gate, Procs, Progress, Summary, wait_for
from ..profiles import Profile
from ..systems import Outcome, Procrastinate, ReliableQ, System, TasksDB


class Bench:
    """The profile, the gate, the systems under test, and what earlier scenarios measured."""

    def __init__(self, profile: Profile, out: Path, progress: Progress, gate: Gate, database_url: str) -> None:
        self.p = profile
        self.out = out
        self.logs = out / "logs"
        self.say = progress.say
        self.gate = gate
        self.database_url = database_url
        self.rq = ReliableQ()
        peers: list[System] = [Procrastinate(), TasksDB()] if profile.peers else []
        self.peers = [s for s in peers if s.available]
        self.missing_peers = [s.name for s in peers if not s.available]
        self.rates: dict[str, float] = {}  # the last rate per key: sizes the next run to last about p.seconds
        self.results: dict[str, Any] = {}  # what the targets, the plots and later scenarios read
        self.measured: list[Summary] = []  # every repeated point, in order: the harness checks them for outliers

    def repetitions(self, **params: Any) -> Summary:
        """Return an empty Summary for one measured point, kept so that its outliers reach the report."""
        summary = Summary([], params={"unit": "jobs/s", **params})
        self.measured.append(summary)
        return summary

    def size(self, key: str, guess: float, seconds: float | None = None) -> int:
        rate = self.rates.get(key, guess)
        return max(self.p.min_jobs, int(rate * (seconds or self.p.seconds)))

    def run_throughput(
        self,
        system: System,
        procs: Procs | None,
        job: str,
        n: int,
        run: str,
        *,
        timeout: float | None = None,
        drive: Callable[[], object] | None = None,
    ) -> float:
        """Load n jobs in one commit, wait for the workers (or `drive`) to finish them, gate, return jobs/s.

        The rate is n over the span the database recorded, from the first start to the last finish,
        so workers' start-up and the harness's polling are not in it.
        """
        system.reset()
        began = time.monotonic()
        system.load(n, job)
        if drive is not None:
            drive()
        wait_for(
            lambda: system.unfinished() == 0,
            timeout=timeout or max(60.0, n / 20),
            interval=0.05,
            what=f"{run}: {n} jobs to finish",
            procs=procs,
        )
        wall = time.monotonic() - began
        o = system.outcome()
        self.gate_outcome(run, o, n=n, attempts=n)
        self.gate.window(run, [o.span], wall, "first-start-to-last-finish span")
        return n / o.span

    def gate_outcome(self, run: str, o: Outcome, *, n: int, attempts: int | None = None, dead: int | None = 0) -> None:
        g = self.gate
        g.check(run, f"{n} jobs stored", o.total == n)
        g.check(run, "every job terminal", o.unfinished == 0)
        g.check(run, f"succeeded + dead = jobs ({o.succeeded} + {o.dead} = {n})", o.succeeded + o.dead == n)
        if dead is not None and attempts is not None:
            g.check(run, f"{dead} dead", o.dead == dead)
        if attempts is not None:
            g.check(run, f"one attempt per job ({o.attempts} attempts)", o.attempts == attempts)
        g.check(run, f"attempt history matches the counters ({o.attempt_rows} rows)", o.attempt_rows == o.attempts)
        g.check(run, "no attempt left open", o.open_attempts == 0)

    def sweep(
        self,
        system: System,
        *,
        processes: int,
        concurrency: int,
        job: str,
        tag: str,
        guess: float,
        reps: int | None = None,
        env: dict[str, Any] | None = None,
        around_reps: Callable[[], AbstractContextManager[Any]] = nullcontext,
        into: Summary | None = None,
    ) -> Summary:
        """Start a fleet, warm it up, measure `reps` runs (inside `around_reps()`), stop it.

        The rates go to `into` when given (a point measured over several fleets), else to a new Summary.
        """
        key = f"{system.key}:{job}:{processes}x{concurrency}"
        summary = into or self.repetitions(
            system=system.name, job=job, workers=system.describe(processes, concurrency), run=tag
        )
        with Procs(self.logs) as procs:
            system.start_workers(procs, processes=processes, concurrency=concurrency, tag=tag, **(env or {}))
            system.warm_up(procs, processes * concurrency)
            with around_reps():
                self._reps(system, procs, job, key, tag, processes, concurrency, guess, reps or self.p.reps, summary)
        return summary

    def _reps(
        self,
        system: System,
        procs: Procs,
        job: str,
        key: str,
        tag: str,
        processes: int,
        concurrency: int,
        guess: float,
        reps: int,
        summary: Summary,
    ) -> None:
        for rep in range(reps):
            n = self.size(key, self.rates.get(f"{system.key}:{job}", guess))
            run = f"{tag} {system.name} {job} {system.describe(processes, concurrency)} rep {rep + 1}"
            rate = self.run_throughput(system, procs, job, n, run)
            self.rates[key] = self.rates[f"{system.key}:{job}"] = rate
            summary.values.append(rate)
            self.say(f"  {run}: {rate:,.0f} jobs/s ({n} jobs)")
