"""ReliableQ job kinds of the benchmark (registered only where bench.settings is in use)."""

from __future__ import annotations

import hashlib
import time

import reliableq
from reliableq.leases import ClaimedJob

SLEEP_SECONDS = 0.05
FLAKY_BUDGET = 5


@reliableq.handler("bench.noop")
def noop(job: ClaimedJob) -> None:
    """Nothing: what is measured is the queue itself."""


@reliableq.handler("bench.sleep")
def sleep(job: ClaimedJob) -> None:
    """An I/O-bound job: 50 ms of waiting (a network call, say), no CPU."""
    time.sleep(SLEEP_SECONDS)


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
