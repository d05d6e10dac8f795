"""The claim: due jobs into free slots, limited kinds after the others, in one short transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..floors import OTHER_KINDS, ClaimFloors
from ..registry import Limits
from . import db
from .limits import take_limited, take_rated
from .pick import guard_claims, take
from .records import ClaimedJob, Rescued
from .rescues import rescue_expired


def claim(
    *,
    worker_id: str,
    queues: Sequence[str],
    limit: int,
    lease_seconds: float,
    caps: Mapping[str, int] | None = None,
    limits: Mapping[str, Limits] | None = None,
    rescue: bool = True,
    floors: ClaimFloors | None = None,
    refill: bool = False,
) -> tuple[list[ClaimedJob], list[Rescued]]:
    """Take up to `limit` due jobs, best priority first, and open an attempt for each.

    One short transaction. Its row locks are held only for these statements; the caller
    runs handlers after the commit, so no network call ever happens under them. `limits`
    maps kinds to what their claims must respect (max_running, max_running_per_key,
    rate_limit; `caps` is the max_running-only form); those kinds are claimed after the
    others, each under its own locks (take_limited). A kind that is fair takes its jobs in turn
    among their fair_keys (reliableq.queue.fairness), limited or not. With `rescue`, expired leases are taken
    back first, in the same transaction; without rescue and limits, the claim is a single
    statement sent in autocommit: one round trip, no BEGIN or COMMIT. Paused queues give nothing.
    With `floors` (a worker's), the claim of the unlimited kinds starts at each queue's floor; and a
    `refill` (a claim only for slots that finishes freed, not after a wake or a poll) passes over the
    limited kinds whose last claim found nothing due, for a while (ClaimFloors.idle): they stay
    excluded from the others' claim all the same. So does a refill the other kinds' claim, when a
    worker that knows limited kinds found none of the others due a moment ago.
    """
    if limit < 1:
        return [], []
    controlled = {kind: Limits(max_running=cap) for kind, cap in (caps or {}).items()}
    controlled.update(limits or {})
    # Fair kinds without a limit are claimed with the others, in turn (fairness.substituted).
    fair = tuple(sorted(kind for kind, lim in controlled.items() if lim.fair and not lim.limited))
    queues = tuple(queues)
    if rescue:
        guard_claims(queues, limit, sorted(kind for kind, lim in controlled.items() if lim.fair))
    controlled = {kind: lim for kind, lim in controlled.items() if lim.limited}
    if not rescue and not controlled:
        return take(queues, limit, worker_id, lease_seconds, floors=floors, fair=fair), []

    def passed_over(kind: str) -> bool:
        return refill and floors is not None and floors.idle(kind)

    asked = {kind: lim for kind, lim in controlled.items() if not passed_over(kind)}
    exclude = tuple(sorted(controlled))

    def others() -> list[ClaimedJob]:
        """The other kinds' claim, unless it found nothing due a moment ago and this is a refill."""
        if passed_over(OTHER_KINDS):
            return []
        jobs = take(queues, limit, worker_id, lease_seconds, exclude=exclude, floors=floors, fair=fair)
        if floors is not None:
            floors.asked(OTHER_KINDS, none_due=not jobs)
        return jobs

    # A kind limited by its rate alone, or per key alone, is claimed by one statement of its own, in
    # autocommit; the others need locks held from one statement to the next, so a transaction.
    alone = {kind: lim for kind, lim in asked.items() if not lim.max_running and bool(lim.rate) != bool(lim.per_key)}
    locked = {kind: lim for kind, lim in asked.items() if kind not in alone}
    rescued: list[Rescued] = []
    if rescue or locked:
        with db.atomic():
            rescued = rescue_expired(queues) if rescue else []
            jobs = others()
            # Kinds in one order in every claimer, and each kind's locks in one order (its cap, its
            # rate window, its keys by hash): two claimers never wait for each other in a cycle.
            for kind, kind_limits in sorted(locked.items()):
                room = limit - len(jobs)
                if room <= 0:
                    break
                taken = take_limited(queues, room, worker_id, lease_seconds, kind, kind_limits)
                jobs += taken.jobs
                if floors is not None:
                    floors.saw(taken.at)
                    floors.asked(kind, none_due=taken.none_due)
    else:
        jobs = others()
    for kind, lim in sorted(alone.items()):
        room = limit - len(jobs)
        if room <= 0:
            break
        if lim.rate:
            taken = take_rated(queues, room, worker_id, lease_seconds, kind, lim.rate, fair=lim.fair)
        else:
            taken = take_limited(queues, room, worker_id, lease_seconds, kind, lim)
        jobs += taken.jobs
        if floors is not None:
            floors.saw(taken.at)
            floors.asked(kind, none_due=taken.none_due)
    return jobs, rescued
