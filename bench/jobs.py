"""ReliableQ job kinds of the benchmark (registered only where bench.settings is in use)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import reliableq
from reliableq.queue import ClaimedJob

SLEEP_SECONDS = 0.05
FLAKY_BUDGET = 5


@reliableq.handler("bench.noop")
def noop(job: ClaimedJob) -> None:
    """Nothing: what is measured is the queue itself."""


@reliableq.handler("bench.sleep")
def sleep(job: ClaimedJob) -> None:
    """An I/O-bound job: 50 ms of waiting (a network call, say), no CPU."""
    time.sleep(SLEEP_SECONDS)


@reliableq.handler("bench.async_sleep", timeout=600)
async def async_sleep(job: ClaimedJob) -> None:
    """The same 50 ms of waiting (or payload['seconds']), awaited on the worker's event loop: no thread."""
    await asyncio.sleep(float(job.payload.get("seconds", SLEEP_SECONDS)))


@reliableq.handler("bench.sleep_for", timeout=600)
def sleep_for(job: ClaimedJob) -> None:
    """Hold a thread for payload['seconds'] (the memory reading of the handlers scenario)."""
    time.sleep(float(job.payload.get("seconds", SLEEP_SECONDS)))


@reliableq.handler("bench.isolated_noop", isolation="process")
def isolated_noop(job: ClaimedJob) -> None:
    """Nothing, in a child process: what process isolation costs per attempt."""


@reliableq.handler("bench.hold", timeout=600)
def hold(job: ClaimedJob) -> None:
    """Hold a slot for payload['seconds'] on the first attempt (the recovery scenario kills its worker meanwhile)."""
    if job.attempt == 1:
        time.sleep(float(job.payload.get("seconds", 60)))


@reliableq.handler("bench.flaky", max_attempts=FLAKY_BUDGET)
def flaky(job: ClaimedJob) -> None:
    """Fail transiently with probability payload['rate'], decided by (job id, attempt): reproducible."""
    rate = float(job.payload.get("rate", 0.0))
    roll = int.from_bytes(hashlib.sha256(f"{job.id}:{job.attempt}".encode()).digest()[:8], "big") / 2**64
    if roll < rate:
        raise reliableq.TransientError(f"dependency failed on attempt {job.attempt} (rate {rate:g})")


# Flow control's kinds, registered only in the flow scenario's workers (BENCH_FLOW): a limited kind
# makes every claim of a worker that knows it a transaction with the kind's locks.
KEYS = 1000  # distinct concurrency keys of bench.keyed's jobs
RATE = "1000000/m"  # bench.rated's limit: about 16,700 starts a second, far above the fleet's rate


def keyed(job: ClaimedJob) -> None:
    """Nothing, at most one RUNNING per concurrency key."""


def rated(job: ClaimedJob) -> None:
    """Nothing, under a rate limit the fleet never reaches."""


def register_flow_kinds() -> None:
    """In the flow scenario's workers (BENCH_FLOW) and in the bench process that enqueues their jobs."""
    reliableq.handler("bench.keyed", max_running_per_key=1)(keyed)
    reliableq.handler("bench.rated", rate_limit=RATE)(rated)


if os.environ.get("BENCH_FLOW"):
    register_flow_kinds()


def fair(job: ClaimedJob) -> None:
    """Nothing: its claims rotate among fair_keys."""


def unfair(job: ClaimedJob) -> None:
    """Nothing, in FIFO order: the fairness scenario's control (its tenant is in the payload)."""


def register_fair_kinds() -> None:
    """In the fairness scenario's workers (BENCH_FAIR) and in the bench process that enqueues their jobs."""
    reliableq.handler("bench.fair", fair=True)(fair)
    reliableq.handler("bench.unfair")(unfair)


if os.environ.get("BENCH_FAIR"):
    register_fair_kinds()


# The steps scenario's kinds, run in the harness's own process (reliableq.testing.run_due): each step's
# and checkpoint's call is timed here, where the scenario reads it.
STEP_CALLS: list[float] = []  # seconds of each job.step / job.checkpoint call since the scenario cleared it


def _nothing() -> None:
    return None


@reliableq.handler("bench.steps", timeout=600)
def steps(job: ClaimedJob) -> None:
    """payload['steps'] steps of a function that does nothing, then payload['checkpoints'] checkpoints."""
    for n in range(int(job.payload.get("steps", 0))):
        began = time.perf_counter()
        job.step(f"s{n}", _nothing)
        STEP_CALLS.append(time.perf_counter() - began)
    for n in range(int(job.payload.get("checkpoints", 0))):
        began = time.perf_counter()
        job.checkpoint("c", n)
        STEP_CALLS.append(time.perf_counter() - began)


@reliableq.handler("bench.waiter", timeout=600)
def waiter(job: ClaimedJob) -> None:
    """Wait for the event payload['event'] (parked WAITING until it is emitted)."""
    job.wait_for(job.payload["event"])
