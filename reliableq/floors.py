"""Where a worker's claims and the leader's rescues start reading their index: past the dead entries.

The failure this closes: while any session of the database holds an old snapshot (a REPEATABLE
READ report, pg_dump, a session idle in a transaction that wrote), a claimed job's PENDING
version stays in the due index and a finished job's RUNNING version in the lease index; neither
vacuum nor an index scan may remove them, since the snapshot might still need them. They sit at
the front of each index, exactly where a claim (best priority, oldest run_at first) and a rescue
(oldest lease first) start reading, and every claim and every rescue walked all of them: at
3,000 jobs/s, 180,000 more a minute, each checked against the table.

The mechanism: a claim starts at its queue's floor, the (priority, run_at, id) of the last row
this worker claimed there, but never later than that claim's time less
FLOOR_SLACK_SECONDS (the due index orders rows by those three columns); the rescue starts at the time of the
last rescue that left nothing behind, less a margin. Both are hints, kept in the worker's memory,
never shared and never a condition of correctness:

- A job can become due below a floor: one enqueued in a transaction that began more than the
  slack before a claim passed its run_at, or with a better priority than the queue's floor. Every
  claimer therefore reads its queues from the start now and then (a sweep), at least every
  FLOOR_SWEEP_SECONDS; under a held snapshot a sweep walks the dead entries, so the next one waits
  twenty times as long as this one took (at most 5% of a worker's time). Such a job waits for the
  next sweep: seconds, not lost.
- A claim that excludes kinds (a worker that knows a limited kind claims the others first) never
  takes those kinds' rows, so their backlog would never move its floor. Once such a claim came
  back short, the next ones read only rows due since an earlier claim of this worker less the
  slack (the queue's since): a job due from before that waits for the next sweep, like one below
  a floor.
- A limited kind whose own claim found nothing due is not asked again by the claims that only
  refill slots freed by finishes, for IDLE_KIND_SECONDS: its pick, and for a kind with locks the
  transaction around it, cost a busy worker as much as the claim of the others. Nor, in a worker
  that knows limited kinds, are the other kinds, when their claim found none due. A claim after
  a wake (a notification: a job was enqueued) or a poll asks every kind. A job of a kind passed
  over that turns due by its run_at (a retry, a snooze, a sleep) while the worker is busy waits up
  to that long; an idle worker polls anyway.
- A RUNNING row whose lease expired below the rescue's floor (it was locked by its owner while a
  rescue passed, and that owner neither finished nor renewed it) is taken by the next full rescue,
  at least every RESCUE_SWEEP_SECONDS.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

FLOOR_SLACK_SECONDS = 1.0  # a claim floor sits this far before the oldest run_at it claimed
FLOOR_SWEEP_SECONDS = 2.0  # a worker reads its queues from the start at least this often
IDLE_KIND_SECONDS = 1.0  # a limited kind that had nothing due is asked again at least this often
OTHER_KINDS = ""  # in ClaimFloors.idle: the kinds a worker claims without limits (no kind is named "")
RESCUE_MARGIN_SECONDS = 10.0  # a rescue starts this far before the last complete one
RESCUE_SWEEP_SECONDS = 60.0  # and reads the whole lease index at least this often
SWEEP_SHARE = 20.0  # after a sweep that took t, the next one waits at least SWEEP_SHARE * t

NO_PRIORITY = -(2**31)  # below every priority (an integer column)
NO_TIME = "-infinity"  # below every timestamptz
NO_UUID = uuid.UUID(int=0)  # the lowest uuid
NO_ID = str(NO_UUID)


class _Sweeps:
    """When to read from the start again: every `every` seconds, or 20 times what the last sweep took."""

    def __init__(self, every: float, clock: Callable[[], float]) -> None:
        self._every = every
        self._clock = clock
        self._next = 0.0  # the first read is a sweep

    def due(self) -> bool:
        return self._clock() >= self._next

    def done(self, began: float) -> None:
        """A sweep that began at `began` (the clock's time) just ended."""
        now = self._clock()
        self._next = now + max(self._every, SWEEP_SHARE * (now - began))


class ClaimFloors:
    """Per queue, the (priority, run_at, id) where this worker's next claim starts reading."""

    def __init__(
        self,
        *,
        slack: float = FLOOR_SLACK_SECONDS,
        sweep: float = FLOOR_SWEEP_SECONDS,
        idle: float = IDLE_KIND_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._slack = dt.timedelta(seconds=slack)
        self._sweeps = _Sweeps(sweep, clock)
        self._clock = clock
        self._idle = idle
        self._idle_until: dict[str, float] = {}  # limited kind -> when a refill asks it again
        self._at: dict[str, tuple[int, Any, uuid.UUID]] = {}
        self._since: dict[str, Any] = {}  # per queue: the oldest run_at a claim excluding kinds reads
        self._seen: Any = None  # the database time of this worker's latest claim that took a job
        self._short = True  # the latest claim came back short (or none was made yet)

    def sweeping(self) -> bool:
        """True when the next claim should read its queues from the start."""
        return self._sweeps.due()

    def walking(self) -> bool:
        """True when the next claim should read past its floor's priority: the latest came back short,
        so the floor's priority may have no due row left. A claim that filled up reads only there."""
        return self._short

    def bound(self, queue: str, *, sweep: bool) -> tuple[int, Any, Any, Any]:
        """The (priority, run_at, id) a claim of `queue` reads from, and the oldest run_at a claim that
        excludes kinds reads (its since); the lowest possible in a sweep."""
        if sweep:
            return NO_PRIORITY, NO_TIME, NO_ID, NO_TIME
        since = self._since.get(queue, NO_TIME)
        if queue not in self._at:
            return NO_PRIORITY, NO_TIME, NO_ID, since
        return (*self._at[queue], since)

    def idle(self, kind: str) -> bool:
        """True while a refill claim may pass over limited `kind`: its last claim found nothing due."""
        until = self._idle_until.get(kind)
        return until is not None and self._clock() < until

    def asked(self, kind: str, *, none_due: bool) -> None:
        """A claim asked limited `kind` for jobs; `none_due`: it had none due (not merely no room)."""
        if none_due:
            self._idle_until[kind] = self._clock() + self._idle
        else:
            self._idle_until.pop(kind, None)

    def saw(self, at: Any) -> None:
        """A claim of this worker took jobs at database time `at` (None: it took none)."""
        if at is not None and (self._seen is None or at > self._seen):
            self._seen = at

    def claimed(
        self,
        taken: Iterable[tuple[str, int, dt.datetime, uuid.UUID]],
        *,
        at: Any,
        sweep: bool,
        began: float,
        exhausted: Iterable[str] = (),
    ) -> None:
        """Move the floors after a claim made at database time `at`: `taken` is (queue, priority,
        run_at, id) of every job it took, in the claim's order.

        A floor is the last row taken (every row before it was taken by this claim or was locked
        by another's), but never later than `at` less the slack: a job enqueued
        by a transaction that began up to the slack before this claim and commits after it is
        still found by the next claim. (Jobs due long ago, a backlog, bound the floor exactly.)
        """
        last: dict[str, tuple[int, Any, uuid.UUID]] = {}
        for queue, priority, run_at, job_id in taken:
            last[queue] = (priority, run_at, job_id)
        for queue, (priority, run_at, job_id) in last.items():
            latest = at - self._slack
            key = (priority, run_at, job_id) if run_at < latest else (priority, latest, NO_UUID)
            old = self._at.get(queue)
            # A sweep read from the start: where it stopped is the front. A floored claim only moves forward.
            self._at[queue] = key if sweep or old is None else max(old, key)
        # An `exhausted` queue gave fewer rows than asked: none was left that this claim could lock.
        # A row that turns due later has a run_at from after an earlier claim of this worker less
        # the slack, like a floor's; a claim that excludes kinds (their backlog is never taken by
        # it, so never moves its floor) reads only from there, not through that whole backlog.
        exhausted = list(exhausted)
        self._short = bool(exhausted)
        if self._seen is not None:
            since = self._seen - self._slack
            for queue in exhausted:
                old_since = self._since.get(queue)
                self._since[queue] = since if sweep or old_since is None else max(old_since, since)
        if sweep:
            for queue in set(self._since) - set(exhausted):
                del self._since[queue]
        self.saw(at)
        if sweep:
            self._sweeps.done(began)


class RescueFloor:
    """The lease expiry where the leader's next rescue starts reading the lease index."""

    def __init__(
        self,
        *,
        margin: float = RESCUE_MARGIN_SECONDS,
        sweep: float = RESCUE_SWEEP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._margin = dt.timedelta(seconds=margin)
        self._sweeps = _Sweeps(sweep, clock)
        self._at: dt.datetime | None = None

    def sweeping(self) -> bool:
        return self._at is None or self._sweeps.due()

    def bound(self, *, sweep: bool) -> Any:
        return NO_TIME if sweep or self._at is None else self._at

    def rescued(self, *, at: dt.datetime, complete: bool, sweep: bool, began: float) -> None:
        """After a rescue at database time `at`: `complete` if it left no expired lease it could take."""
        if complete:
            self._at = at - self._margin
        if sweep:
            self._sweeps.done(began)
