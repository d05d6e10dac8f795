"""The producer: claims due jobs into free slots, never more, and hands each to the pool."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from ..queue import ClaimedJob
from ..registry import Limits
from . import executor
from .completer import fields
from .ledger import Ledger
from .pool import Pool
from .store import Store

logger = logging.getLogger("reliableq.worker")
# Every claim's duration, at DEBUG: what the benchmark's long-transaction scenario reads.
claim_logger = logging.getLogger("reliableq.worker.claim")


class Producer:
    def __init__(
        self,
        store: Store,
        ledger: Ledger,
        pool: Pool,
        *,
        worker_id: str,
        queues: Sequence[str],
        lease_seconds: float,
        limits: Mapping[str, Limits],
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._pool = pool
        self.worker_id = worker_id
        self.queues = tuple(queues)
        self.lease_seconds = lease_seconds
        self.limits = dict(limits)  # kinds whose claims are limited fleet-wide
        self._uncertain = False  # a claim failed: it may have committed anyway
        self.claimed = 0

    def produce(self, *, rescue: bool, refill: bool = False) -> bool:
        """Claim into every free slot and start the handlers; True when fewer jobs were due than slots.
        `refill`: only finishes freed the slots since the last claim (no wake, no poll)."""
        free = self._pool.free
        if free <= 0:
            return False
        if self._uncertain:
            # The last claim's COMMIT went unacknowledged: the jobs it may have taken are RUNNING
            # under our worker id with tokens we never received. Put them back now.
            for job_id in self._store.release_unacknowledged(worker_id=self.worker_id, known=self._ledger.tokens()):
                logger.warning("job=%s claimed by a commit that was never acknowledged; released", job_id)
        # Until the claim returns, its commit may have happened without us hearing of it.
        self._uncertain = True
        began = time.monotonic()
        jobs, _ = self._store.claim(
            worker_id=self.worker_id,
            queues=self.queues,
            limit=free,
            lease_seconds=self.lease_seconds,
            limits=self.limits,
            rescue=rescue,
            refill=refill,
        )
        self._uncertain = False
        if claim_logger.isEnabledFor(logging.DEBUG):
            claim_logger.debug("claim %.3f ms %d/%d", 1000 * (time.monotonic() - began), len(jobs), free)
        self._start(jobs)
        return len(jobs) < free

    def _start(self, jobs: list[ClaimedJob]) -> None:
        now = time.monotonic()
        if logger.isEnabledFor(logging.DEBUG):  # a line per job at DEBUG; INFO gets the loop's summary
            for job in jobs:
                logger.debug(
                    "job=%s kind=%s attempt=%s/%s token=%s claimed",
                    job.id,
                    job.kind,
                    job.attempt,
                    job.max_attempts,
                    job.lease_token,
                    extra=fields(job.id, job.kind, job.attempt, job.lease_token),
                )
        timeouts: dict[str, float] = {}  # a claim's jobs are mostly of one kind or a few
        for job in jobs:
            if job.kind not in timeouts:
                timeouts[job.kind] = executor.timeout_for(job.kind)
        self._ledger.add(jobs, [now + timeouts[job.kind] for job in jobs])
        self._pool.submit(jobs)
        self.claimed += len(jobs)
