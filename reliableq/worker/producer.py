"""The producer: claims due jobs into free slots, never more, and hands each to the pool."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from .. import queue as jobqueue
from ..queue import ClaimedJob, Finish, FinishResult
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
        self._joins: bool | None = None
        self.claimed = 0

    @property
    def fuses(self) -> bool:
        """Whether this worker's claim shares a transaction with the ends before it
        (Store.finish_and_claim): its claim is one statement, and the database is near."""
        if self._joins is None:
            self._joins = self._store.joins()  # decided on the loop's first connection
        return self._joins and jobqueue.single_statement(self.limits)

    def produce(
        self,
        *,
        rescue: bool,
        ends: Sequence[Finish] | None = None,
        frees: int = 0,
        written: Callable[[FinishResult], None] | None = None,
    ) -> bool:
        """Claim into every free slot and start the handlers; True when fewer jobs were due than slots.

        With `ends` (only when `fuses`, without rescue), they are written in the claim's transaction,
        the `frees` slots they give back are claimed into as well, and `written` hears how the ends
        fared before any claimed handler starts (it gives those slots back to the pool).
        """
        free = self._pool.free + frees
        if free <= 0 and ends is None:
            return False
        if self._uncertain:
            # The last claim's COMMIT went unacknowledged: the jobs it may have taken are RUNNING
            # under our worker id with tokens we never received. Put them back now.
            for job_id in self._store.release_unacknowledged(worker_id=self.worker_id, known=self._ledger.tokens()):
                logger.warning("job=%s claimed by a commit that was never acknowledged; released", job_id)
        # Until the claim returns, its commit may have happened without us hearing of it.
        self._uncertain = True
        began = time.monotonic()
        if ends is None:
            jobs, _ = self._store.claim(
                worker_id=self.worker_id,
                queues=self.queues,
                limit=free,
                lease_seconds=self.lease_seconds,
                limits=self.limits,
                rescue=rescue,
            )
        else:
            result, jobs = self._store.finish_and_claim(
                ends,
                worker_id=self.worker_id,
                queues=self.queues,
                limit=max(0, free),
                lease_seconds=self.lease_seconds,
                limits=self.limits,
            )
            if written is not None:
                written(result)
        self._uncertain = False
        if claim_logger.isEnabledFor(logging.DEBUG):
            claim_logger.debug("claim %.3f ms %d/%d", 1000 * (time.monotonic() - began), len(jobs), free)
        self._start(jobs)
        return len(jobs) < free

    def _start(self, jobs: list[ClaimedJob]) -> None:
        now = time.monotonic()
        debug = logger.isEnabledFor(logging.DEBUG)  # a line per job at DEBUG; INFO gets the loop's summary
        for job in jobs:
            if debug:
                logger.debug(
                    "job=%s kind=%s attempt=%s/%s token=%s claimed",
                    job.id,
                    job.kind,
                    job.attempt,
                    job.max_attempts,
                    job.lease_token,
                    extra=fields(job.id, job.kind, job.attempt, job.lease_token),
                )
            self._ledger.add(job, deadline=now + executor.timeout_for(job.kind))
        self._pool.submit(jobs)
        self.claimed += len(jobs)
