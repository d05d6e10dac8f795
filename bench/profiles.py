"""How big each scenario is: smoke (CI, under a minute), quick (about 10 minutes), full (longer, steadier)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    reps: int  # repetitions of every measured point
    seconds: float  # target length of one throughput run (jobs are sized from the last measured rate)
    min_jobs: int
    ingest_clients: tuple[int, ...]
    ingest_seconds: float
    bulk_size: int  # jobs per transaction in the bulk ingestion path
    concurrency: tuple[int, ...]  # one worker process, no-op jobs
    processes: tuple[int, ...]  # worker processes at fleet[1] concurrency, no-op jobs
    fleet: tuple[int, int]  # (processes, concurrency): the headline configuration; peers and ceilings match it
    io_concurrency: tuple[int, ...]  # one worker process, 50 ms jobs
    handler_slots: tuple[int, int, int]  # the handlers scenario: (threads for 50 ms jobs, async, isolated no-ops)
    latency_rate: float  # offered load, jobs/s
    latency_seconds: float
    pileup: tuple[int, ...]  # finished rows in the table
    pileup_seconds: float
    leases: tuple[float, ...]  # recovery: lease lengths
    recovery_trials: int  # kills per lease length
    flaky_rates: tuple[float, ...]
    flaky_jobs: int  # jobs per failure rate
    pooler: tuple[int, int, int]  # (processes, concurrency, PgBouncer pool size): direct and through PgBouncer
    fleets: tuple[int, ...]  # the fleet scenario: worker processes, each at fleet_slots
    fleet_slots: int
    maintenance_seconds: float  # the fleet scenario's window counting maintenance statements
    xmin_rates: tuple[float, ...]  # the long-transaction scenario: offered jobs/s
    xmin_phases: tuple[float, float, float]  # seconds of baseline, with the snapshot held, after its release
    xmin_variants: tuple[str, ...]  # how the snapshot is held (bench.scenarios.xmin.VARIANTS; "none": a control)
    xmin_window: float  # seconds per row of its report
    soak_seconds: float  # the soak scenario: how long half the maximum is offered
    soak_sample: float  # seconds between its samples
    soak_retention: float  # RETENTION_SECONDS for SUCCEEDED jobs during it
    workflow_members: int  # the workflows scenario: jobs of its fan-in (n - 1 and a report), and as many independent
    workflow_chain: int  # its chain: members, each after the one before
    fair_flood: int  # the fairness scenario: one tenant's backlog of no-op jobs ...
    fair_tenants: int  # ... then this many small tenants ...
    fair_tenant_jobs: int  # ... of this many jobs each
    fair_keys: int  # the claim's cost is measured beside a backlog over this many keys
    schedule_count: int  # the schedules scenario: one worker with this many schedules ...
    schedule_window: float  # ... measured for this many seconds per arm
    steps_jobs: int  # the steps scenario: jobs of each arm (empty, one step, one checkpoint) a repetition
    steps_long: int  # the steps of its long job
    steps_waiters: int  # jobs parked WAITING, then woken by as many emits
    steps_parked: int  # jobs parked (sleeping, or waiting) beside the claim's due ones ...
    steps_window: float  # ... for this many seconds an arm
    peers: bool
    # The ceilings scenario also runs pgbench with each claim and its finish in one transaction: one
    # commit and one WAL flush a batch, not two. What a fused finish-and-claim statement could gain
    # in PostgreSQL, at most (it would still take the two statements' work).
    ceiling_fused: bool = False
    # Pairs of the ceilings scenario's 1 x fc worker and one-process bare loop (0: as many as reps). A
    # pair's ratio moves by some 15% on a shared machine: more pairs narrow the median's interval
    # without lengthening every other measured point, as more reps would.
    pairs: int = 0


PROFILES = {
    "smoke": Profile(
        name="smoke",
        reps=1,
        seconds=0.6,
        min_jobs=200,
        ingest_clients=(1, 4),
        ingest_seconds=0.5,
        bulk_size=200,
        concurrency=(4,),
        processes=(1, 2),
        fleet=(2, 4),
        io_concurrency=(8,),
        handler_slots=(8, 50, 2),
        latency_rate=50,
        latency_seconds=1.0,
        pileup=(0, 2_000),
        pileup_seconds=0.5,
        leases=(1.0,),
        recovery_trials=1,
        flaky_rates=(0.0, 0.5),
        flaky_jobs=100,
        pooler=(2, 4, 4),
        fleets=(1, 2),
        fleet_slots=4,
        maintenance_seconds=2.0,
        xmin_rates=(200,),
        xmin_phases=(4.0, 8.0, 4.0),
        xmin_variants=("none", "repeatable read"),
        xmin_window=4.0,
        soak_seconds=8.0,
        soak_sample=2.0,
        soak_retention=60.0,
        workflow_members=200,
        workflow_chain=50,
        fair_flood=2_000,
        fair_tenants=10,
        fair_tenant_jobs=3,
        fair_keys=1_000,
        schedule_count=100,
        schedule_window=3.0,
        steps_jobs=20,
        steps_long=100,
        steps_waiters=50,
        steps_parked=2_000,
        steps_window=2.0,
        peers=True,
    ),
    "quick": Profile(
        name="quick",
        reps=3,
        seconds=4.0,
        min_jobs=500,
        ingest_clients=(1, 4, 16),
        ingest_seconds=2.5,
        bulk_size=1000,
        concurrency=(1, 2, 4, 8, 16),
        processes=(1, 2, 4),
        fleet=(2, 16),
        io_concurrency=(8, 32, 64),
        handler_slots=(64, 500, 8),
        latency_rate=100,
        latency_seconds=5.0,
        pileup=(0, 100_000, 1_000_000),
        pileup_seconds=4.0,
        leases=(2.0, 5.0, 10.0),
        recovery_trials=2,
        flaky_rates=(0.0, 0.1, 0.5),
        flaky_jobs=5000,
        pooler=(3, 8, 4),
        fleets=(1, 2, 4, 8),
        fleet_slots=8,
        maintenance_seconds=6.0,
        xmin_rates=(800, 3000),
        xmin_phases=(20.0, 60.0, 30.0),
        xmin_variants=("repeatable read", "idle in transaction"),
        xmin_window=10.0,
        soak_seconds=120.0,
        soak_sample=10.0,
        soak_retention=30.0,
        workflow_members=5_000,
        workflow_chain=500,
        fair_flood=20_000,
        fair_tenants=100,
        fair_tenant_jobs=5,
        fair_keys=10_000,
        schedule_count=1_000,
        schedule_window=20.0,
        steps_jobs=200,
        steps_long=1_000,
        steps_waiters=500,
        steps_parked=100_000,
        steps_window=10.0,
        peers=True,
    ),
    "full": Profile(
        name="full",
        reps=5,
        seconds=8.0,
        min_jobs=1000,
        ingest_clients=(1, 2, 4, 8, 16),
        ingest_seconds=8.0,
        bulk_size=1000,
        concurrency=(1, 2, 4, 8, 16),
        processes=(1, 2, 4),
        fleet=(2, 16),
        io_concurrency=(8, 32, 64),
        handler_slots=(64, 500, 8),
        latency_rate=100,
        latency_seconds=20.0,
        pileup=(0, 100_000, 1_000_000, 10_000_000),
        pileup_seconds=6.0,
        leases=(2.0, 5.0, 10.0),
        recovery_trials=5,
        flaky_rates=(0.0, 0.1, 0.5),
        flaky_jobs=10_000,
        pooler=(3, 8, 4),
        fleets=(1, 2, 4, 8),
        fleet_slots=8,
        maintenance_seconds=15.0,
        xmin_rates=(800, 3000),
        xmin_phases=(120.0, 600.0, 120.0),
        xmin_variants=("none", "repeatable read", "idle in transaction"),
        xmin_window=10.0,
        soak_seconds=1800.0,
        soak_sample=10.0,
        soak_retention=60.0,
        workflow_members=10_000,
        workflow_chain=1_000,
        fair_flood=100_000,
        fair_tenants=100,
        fair_tenant_jobs=5,
        fair_keys=10_000,
        schedule_count=1_000,
        schedule_window=60.0,
        steps_jobs=500,
        steps_long=1_000,
        steps_waiters=2_000,
        steps_parked=100_000,
        steps_window=30.0,
        peers=True,
    ),
}


def override(profile: Profile, assignment: str) -> Profile:
    """`profile` with one field set from `name=value` (the harness's --set): a number, a word, or
    a comma-separated list for the tuple fields (`xmin_rates=3000`, `xmin_variants=none,idle in
    transaction`, `pileup=0,1000000`). ValueError, in words, for an unknown field or a bad value."""
    name, sep, text = assignment.partition("=")
    name = name.strip()
    fields = {f.name: str(f.type) for f in dataclasses.fields(Profile)}
    fields.pop("name")
    if not sep or name not in fields:
        raise ValueError(f"--set takes name=value, the name one of: {', '.join(sorted(fields))}; got {assignment!r}")
    current = getattr(profile, name)
    try:
        if isinstance(current, tuple):
            kind = type(current[0]) if current else str
            value: object = tuple(_read(kind, part.strip()) for part in text.split(",") if part.strip())
            # tuple[int, int] (fleet, pooler, xmin_phases) has a fixed length; tuple[int, ...] does not.
            if "..." not in fields[name] and len(value) != len(current):  # type: ignore[arg-type]
                raise ValueError(f"takes {len(current)} comma-separated values ({fields[name]})")
        else:
            value = _read(type(current), text.strip())
    except ValueError as exc:
        raise ValueError(f"--set {name}: {exc}") from None
    return dataclasses.replace(profile, **{name: value})


def _read(kind: type, text: str) -> object:
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"{text!r} is not true or false")
        return text.lower() in ("true", "1", "yes")
    if kind is int:
        number = float(text)  # 1e6 and 1_000_000 alike
        if number != int(number):
            raise ValueError(f"{text!r} is not a whole number")
        return int(number)
    if kind is float:
        return float(text)
    return text
