"""The fleet's maintenance, done by one elected worker: rescue of expired leases, the rest of long
workflow cancels, schedules' slots, retention.

Every worker runs this service; one of them holds the `maintenance` lease (reliableq.queue.leadership)
and does the duties, the others only try now and then to take the lease over. The holder renews
it every third of its length; if it dies or is paused, its lease runs out and the next worker to
try takes the duties over under a new token, within one lease and a third. So a fleet of fifty
workers sends one rescue per interval, not fifty, and one worker makes the schedules' jobs and
deletes old jobs. Every worker writes the schedules its code declares once, when it starts.

The duty's lease is short (lead_seconds), not the jobs' LEASE_SECONDS: a job whose worker died
comes back once its lease has run out and a leader rescues it, so a leader that died with it
would otherwise hold every queue's rescues back by its own job lease and more.

None of the duties needs the lease for safety (a rescue takes only expired leases, under SKIP
LOCKED; a schedule's slot is one job by its dedupe key; retention deletes finished rows): two holders for
a moment, as when a paused leader wakes, do the same work twice, never different work.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from .store import Store

logger = logging.getLogger("reliableq.worker")

DUTY = "maintenance"
LEAD_FLOOR_SECONDS = 2.0  # however short POLL_SECONDS is: a leader's loop may stall that long


def lead_seconds(lease_seconds: float, rescue_seconds: float) -> float:
    """The maintenance lease: three rescue intervals (at least LEAD_FLOOR_SECONDS), never longer
    than the jobs' lease. Renewed, and bid for by the others, every third of it."""
    return min(lease_seconds, max(3.0 * rescue_seconds, LEAD_FLOOR_SECONDS))


class Maintenance:
    def __init__(
        self,
        store: Store,
        *,
        worker_id: str,
        queues: tuple[str, ...],
        lease_seconds: float,
        rescue_seconds: float,
        schedule_seconds: float,
        retention_seconds: float,
        cascade: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._cascade = cascade
        self._worker_id = worker_id
        self._queues = queues
        self._lead_seconds = lead_seconds(lease_seconds, rescue_seconds)
        self._intervals = {"rescue": rescue_seconds, "schedule": schedule_seconds, "retain": retention_seconds}
        # A slot later than this when a round reaches it was missed: two scheduling intervals and two leases
        # of the duty, so neither a slow round nor a leader's failover counts as a stopped fleet.
        self._late_seconds = 2.0 * (schedule_seconds + self._lead_seconds)
        self._synced = False
        self._token: uuid.UUID | None = None
        self._next_lead = 0.0
        self._next: dict[str, float] = {}

    @property
    def leading(self) -> bool:
        return self._token is not None

    def tick(self, now: float) -> None:
        """Write the code's schedules (once), keep or try for the lease (every third of it), and, while
        holding it, do what is due."""
        if not self._synced:
            self._store.sync_schedules()
            self._synced = True
        if now >= self._next_lead:
            self._lead()
            self._next_lead = now + self._lead_seconds / 3.0
        if not self.leading:
            return
        if self._due("rescue", now):
            self._store.guard_claims(self._queues)
            self._store.rescue()
            # A cancel handed on and not taken up (its worker died): this worker's completer takes it
            # up, off this thread, which claims.
            if self._store.handed_on(older_than=self._intervals["rescue"]):
                self._cascade()
        if self._due("schedule", now):
            # At least every schedule interval (an operator's new schedule is seen then), sooner when a slot comes.
            wait = self._store.schedule_cron(late_seconds=self._late_seconds)
            if wait is not None:
                self._next["schedule"] = now + min(self._intervals["schedule"], wait)
        if self._due("retain", now):
            deleted = self._store.retain()
            if any(deleted.values()):
                logger.info("retention deleted %s", ", ".join(f"{n} {s}" for s, n in deleted.items() if n))
            if deleted.more:
                self._next["retain"] = now  # old rows are left: another round at the next tick

    def resign(self) -> None:
        """Hand the lease back at once (a clean shutdown), so the next worker need not wait it out."""
        if self._token is not None and self._store.resign(DUTY, token=self._token):
            logger.info("worker %s resigned as the maintenance leader", self._worker_id)
        self._token = None

    def _lead(self) -> None:
        token = self._store.lead(DUTY, holder=self._worker_id, seconds=self._lead_seconds, token=self._token)
        if token is not None and self._token is None:
            logger.info("worker %s is the maintenance leader (rescue, schedules, retention)", self._worker_id)
            self._next = {}  # a new leader does each duty at once
        elif token is None and self._token is not None:
            logger.warning("worker %s lost the maintenance lease; another worker holds it", self._worker_id)
        self._token = token

    def _due(self, duty: str, now: float) -> bool:
        if now < self._next.get(duty, 0.0):
            return False
        self._next[duty] = now + self._intervals[duty]
        return True
