"""Fair share: a fair kind's claims take its due jobs in turn among their fair_keys.

A job of a fair kind gets its turn (fair_seq) when it is stored: its key's last turn among the
PENDING jobs of its (queue, kind, priority), plus the key's stride (1, or 1/w for a key of weight
w in RELIABLEQ["FAIR_WEIGHTS"]), but never before the turn of that class's head (the due job a
claim would take next there). A key that floods the queue takes turns 1..100,000; a key that
arrives while the head is at turn 50,000 takes 50,000 too, after the flood's own (turns tie in
age order), and its next job 50,001: keys alternate.
The order lives in the rows (reliableq_job_fair_due), so every claimer of the fleet continues
the same rotation, no row is written by every claim, and a pick reads as many index entries as
it takes jobs, whatever the number of keys or the depth of one key's backlog.

How many of a claim's slots go to a fair kind is decided as for any kind: by the kind's rows
among the best due rows of the claim's queues (priority, then run_at). Those rows are tokens;
the slots go to the kind's due jobs in turn order instead (`substituted`). A job of the kind
without a turn (stored before the kind was fair, a workflow's member or callback) is claimed as
itself when its token comes, so none waits forever.

What it cannot guarantee: a turn is fixed when the job is stored, so jobs stored in a
transaction that stays open for long, or scheduled for later, take the turns of that moment,
and two transactions storing jobs of one key at once may give both the same turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..conf import reliableq_settings
from .sql import JOB, S

# Due jobs of a fair kind, in turn order: the predicate of reliableq_job_fair_due written out.
_FAIR_DUE = f"{JOB}.status = {S.PENDING} AND {JOB}.fair_seq IS NOT NULL"


@dataclass(frozen=True, slots=True)
class Turn:
    """What a job of a fair kind needs to take its turn: its key and its key's stride."""

    key: str | None
    stride: float


def turn_for(key: str | None) -> Turn:
    """The turn arguments of a job of a fair kind with this fair_key."""
    weights = reliableq_settings.FAIR_WEIGHTS or {}
    return Turn(key, 1.0 / float(weights.get(key, 1.0)) if key is not None else 1.0)


def first_turn_sql(
    *,
    keyed: bool | None,
    queue: str = "%s",
    kind: str = "%s",
    priority: str = "%s",
    key: str = "%s",
    stride: str = "%s",
) -> str:
    """A new job's turn: its key's last turn plus its stride, but never before its class's head.

    A key with no job waiting takes the head's own turn (after the head, which is older). The
    arguments are SQL, parameters by default (in first_turn_params' order). Without a key (`keyed`
    False) the key is the kind's jobs that have none; `keyed` None decides by `key`'s value row by
    row. 0 when the class has no due job and the key no waiting one.
    """

    def last(test: str) -> str:  # the last turn of the key, whose fair_key passes `test`
        return f"""(SELECT k.fair_seq FROM {JOB} k
          WHERE k.status = {S.PENDING} AND k.fair_seq IS NOT NULL AND k.queue = {queue} AND k.kind = {kind}
            AND k.priority = {priority} AND k.fair_key {test}
          ORDER BY k.fair_seq DESC LIMIT 1)"""

    # The key's own index (reliableq_job_fair_key or _fair_nokey) is the one its predicate names.
    is_key = f"= {key} AND k.fair_key IS NOT NULL"
    if keyed is None:
        own = f"CASE WHEN {key} IS NULL THEN {last('IS NULL')} ELSE {last(is_key)} END"
    else:
        own = last(is_key if keyed else "IS NULL")
    return f"""GREATEST(
        (SELECT h.fair_seq FROM {JOB} h
          WHERE h.status = {S.PENDING} AND h.fair_seq IS NOT NULL AND h.queue = {queue} AND h.kind = {kind}
            AND h.priority = {priority} AND h.run_at <= now()
          ORDER BY h.fair_seq, h.id LIMIT 1),
        {own} + {stride},
        0)"""


def first_turn_params(queue: str, kind: str, priority: int, turn: Turn) -> list[Any]:
    """first_turn_sql's parameters, in its order."""
    head = [queue, kind, priority]
    key = [turn.key] if turn.key is not None else []
    return [*head, *head, *key, turn.stride]


FAIR_DUE_INDEX = "reliableq_job_fair_due"  # the index a fair kind's pick reads, in turn order


def heads_sql(limit: int = 10) -> str:
    """The pick of a fair kind's next due jobs in one queue (parameters: queue, kind), as a claim makes
    it: what the plan guard puts to the planner (reliableq.queue.pick.guard_claims)."""
    return f"""SELECT {JOB}.id FROM {JOB}
                WHERE {_FAIR_DUE} AND {JOB}.queue = %s AND {JOB}.kind = %s AND {JOB}.run_at <= statement_timestamp()
                ORDER BY {JOB}.priority, {JOB}.fair_seq, {JOB}.id LIMIT {int(limit)}"""


def substituted(main: str, fair: tuple[str, ...], *, per_key: str = "", with_key: bool = False) -> str:
    """A pick whose rows of the `fair` kinds stand for as many of those kinds' due jobs in turn order.

    `main` is a pick (FOR UPDATE SKIP LOCKED) giving id, kind, queue, priority, run_at, fair_seq
    (and concurrency_key when `with_key`); its rows of a fair kind that have a turn are tokens: per
    (queue, kind), that many of the kind's due jobs are taken in turn order instead, skipping rows
    others hold (a token may be one of them). If fewer are free, the tokens themselves make up the
    difference: the claim stays work-conserving. `per_key` filters the turns as the pick filtered
    its rows (a saturated concurrency_key). Its parameters follow main's: substituted_params().
    """
    out = "id, concurrency_key" if with_key else "id"
    spare_out = "m.id, m.concurrency_key" if with_key else "m.id"
    head_key = f", {JOB}.concurrency_key" if with_key else ""
    return f"""
        WITH main AS MATERIALIZED ({main}),
        need AS MATERIALIZED (
            SELECT queue, kind, count(*)::int AS n FROM main
             WHERE kind = ANY(%s::text[]) AND fair_seq IS NOT NULL GROUP BY queue, kind
        ),
        heads AS MATERIALIZED (
            SELECT h.*, n.queue, n.kind FROM need n CROSS JOIN LATERAL (
                SELECT {JOB}.id{head_key} FROM {JOB}
                 WHERE {_FAIR_DUE} AND {JOB}.queue = n.queue AND {JOB}.kind = n.kind
                   AND {JOB}.run_at <= statement_timestamp(){per_key}
                 ORDER BY {JOB}.priority, {JOB}.fair_seq, {JOB}.id
                 LIMIT n.n
                   FOR UPDATE SKIP LOCKED
            ) h
        ),
        short AS (
            SELECT n.queue, n.kind, n.n - (SELECT count(*) FROM heads h WHERE h.queue = n.queue AND h.kind = n.kind)
                   AS n
              FROM need n
        ),
        spare AS (
            SELECT {spare_out} FROM (
                SELECT m.*, row_number() OVER (PARTITION BY m.queue, m.kind ORDER BY m.priority, m.run_at, m.id) AS rn
                  FROM main m
                 WHERE m.kind = ANY(%s::text[]) AND m.fair_seq IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM heads h WHERE h.id = m.id)
            ) m JOIN short s ON s.queue = m.queue AND s.kind = m.kind
             WHERE m.rn <= s.n
        )
        SELECT {out} FROM main WHERE NOT (kind = ANY(%s::text[]) AND fair_seq IS NOT NULL)
        UNION ALL SELECT {out} FROM heads
        UNION ALL SELECT {out} FROM spare"""


def substituted_params(fair: tuple[str, ...], per_key: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """substituted()'s own parameters, which follow the main pick's (`per_key`: its filter's)."""
    kinds = list(fair)
    return (kinds, *per_key, kinds, kinds)
