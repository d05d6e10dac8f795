"""What a change of workflow members does to their graph, as CTEs the door adds to the statement
that makes the change (reliableq.queue.door): counts, release, cancels, the workflow's end, callbacks.

A member waits (WAITING) until each of its upstream members has finished; what finished is
counted in WorkflowCount rows. Every member has an edge to each of its dependents and one to its
workflow; its end takes one off each target's count, in the shard its edge names. A target of
few upstreams has one count (shard -1); a target of many (a fan-in, a workflow of thousands) has
up to MAX_SHARDS shards, and its shard -1 counts the shards still above zero, so the members of a
fan-in finishing at once lock different rows, and only the last member of each shard touches the
total. The transaction whose decrement brings a total to zero is the one that decides: it makes
the member PENDING, or ends the workflow and enqueues its callbacks. Row locks serialize the
decrements of one row, and each UPDATE re-reads a row it waited for, so exactly one transaction
sees each zero, committed or not: a crash before the commit undoes the end and the decision
together.

Locks are taken in one order in every statement (count shards, then totals, each sorted, then
the jobs released and the workflow's row; a CTE that would otherwise run early reads the one
before it), so two finishes never wait for each other in a cycle: a finish waits for a
job's row only where its own decrement made the zero, which no other transaction can be holding.
A member that ends DEAD or CANCELLED cancels its WAITING dependents that say
on_upstream_failure="cancel", transitively: a bounded share in the same statement, the rest handed
on (WorkflowCascade); their ends are counted as well.

Every walk, count and lookup is linear in the rows it touches: sets are read through jsonb objects
(_map), rows are found by key (scalar subqueries, LATERAL probes), never by a join a planner with
stale statistics could turn into a scan per row.
"""

from __future__ import annotations

from ..rules import CALLBACK_KEY_PREFIX
from .enqueue import CHANNEL
from .fairness import first_turn_sql
from .sql import CASCADE_TABLE, COUNT, EDGE, JOB, WORKFLOW, S

UPSTREAM_CANCELLED = "upstream"  # how a member cancelled by its upstream's end starts its last_error
# The condition, in a statement with ended(), true when what it did needs a second look in a
# statement of its own (a fresh snapshot) before the transaction commits (door.cancel_stuck).
RECHECK = "EXISTS (SELECT 1 FROM wf_zero WHERE failed > 0)"


def _map(rows: str, key: str, value: str) -> str:
    """A jsonb object from `rows`, `key` (as text) to `value`: read by ->> in O(log n) per row.

    A statement that asks, for each of n rows, whether it is among m others (or what another CTE
    says of it) does so through such an object, never by `= ANY(ARRAY(...))` as a filter or a
    subquery over a CTE per row, which cost n x m: a 10,000-member chain's cancel took 21 s so."""
    return f"(SELECT COALESCE(jsonb_object_agg({key}, {value}), '{{}}'::jsonb) AS m FROM {rows})"


def _walk(start: str, step: str, limit: int, *, seeds: str | None = None) -> str:
    """The members reachable from the ids of `start` by edges to members that satisfy `step` (a
    condition on the member j), transitively, breadth first, at most `limit` of them; with `seeds`,
    the ids of `seeds` first, and what is reachable from them too.

    Each step is a probe of the edges' upstream index and of the jobs' primary key per row (OFFSET 0
    keeps each LATERAL a subquery of its own), so no statistics can make it a walk of either table;
    UNION keeps each member once, and the LIMIT stops the recursion once it has enough."""
    probe = f"""CROSS JOIN LATERAL (SELECT e.target FROM {EDGE} e WHERE e.upstream = s.id OFFSET 0) e
        CROSS JOIN LATERAL (SELECT j.id FROM {JOB} j WHERE j.id = e.target AND {step} OFFSET 0) j"""
    first = f"SELECT j.id FROM {start} s {probe}"
    if seeds is not None:
        first = f"SELECT id FROM (SELECT id FROM {seeds} UNION ALL {first}) first"
    return f"""WITH RECURSIVE reach(id) AS (
        {first}
        UNION
        SELECT j.id FROM reach s {probe}
    ) SELECT id FROM reach LIMIT {int(limit)}"""


def _recount(opened: str, ended: bool) -> str:
    """CTEs that count the ends (or, a replay, the reopenings) of the members in `opened` (id, status).

    An end takes one off `remaining` of each target's shard its edge names (and adds one to `failed`
    if it was not a success); a reopening gives them back. A shard that reaches zero takes one off
    its target's total and hands it its failures; a shard that leaves zero takes them back. Ends
    `wf_tops` (target, remaining, failed, workflow of each total changed). Rows are locked by key in
    a set order, then updated by key, each reading its delta from a jsonb object (see _map)."""
    step = "-1" if ended else "1"
    failed = f"CASE WHEN (SELECT m FROM wf_opened_map) ->> e.upstream::text = {S.SUCCEEDED} THEN 0 ELSE 1 END"
    shard_key = "c.target::text || ':' || c.shard::text"
    delta_map = _map("wf_delta WHERE shard >= 0", "target::text || ':' || shard::text", "jsonb_build_array(dr, df)")
    return f"""
wf_opened_map AS MATERIALIZED {_map(opened, "id::text", "status")},
wf_delta AS MATERIALIZED (
    SELECT e.target, e.shard, sum({step})::int AS dr, sum({failed if ended else "-1"})::int AS df
      FROM {EDGE} e
     WHERE e.upstream = ANY(ARRAY(SELECT id FROM {opened}))
     GROUP BY e.target, e.shard
),
wf_delta_map AS MATERIALIZED {delta_map},
wf_shard_locks AS MATERIALIZED (
    SELECT c.id FROM {COUNT} c
     WHERE c.target = ANY(ARRAY(SELECT DISTINCT target FROM wf_delta WHERE shard >= 0)) AND c.shard >= 0
       AND (SELECT m FROM wf_delta_map) ? ({shard_key})
     ORDER BY c.target, c.shard FOR UPDATE OF c
),
wf_shards AS (
    UPDATE {COUNT} c
       SET remaining = c.remaining + ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 0)::int,
           failed = c.failed + ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 1)::int
     WHERE c.id = ANY(ARRAY(SELECT id FROM wf_shard_locks))
 RETURNING c.target, c.remaining, c.failed,
           ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 0)::int AS dr,
           ((SELECT m FROM wf_delta_map) -> ({shard_key}) ->> 1)::int AS df
),
wf_total_delta AS MATERIALIZED (
    SELECT target, sum(dr)::int AS dr, sum(df)::int AS df FROM (
        SELECT target, dr, df FROM wf_delta WHERE shard = -1
        UNION ALL
        SELECT target, -1, failed FROM wf_shards WHERE remaining = 0 AND remaining - dr > 0
        UNION ALL
        SELECT target, 1, df - failed FROM wf_shards WHERE remaining > 0 AND remaining - dr = 0
    ) t GROUP BY target
),
wf_total_map AS MATERIALIZED {_map("wf_total_delta", "target::text", "jsonb_build_array(dr, df)")},
wf_total_locks AS MATERIALIZED (
    SELECT c.id FROM {COUNT} c
     WHERE c.target = ANY(ARRAY(SELECT target FROM wf_total_delta)) AND c.shard = -1
     ORDER BY c.target FOR UPDATE
),
wf_tops AS (
    UPDATE {COUNT} c
       SET remaining = c.remaining + ((SELECT m FROM wf_total_map) -> c.target::text ->> 0)::int,
           failed = c.failed + ((SELECT m FROM wf_total_map) -> c.target::text ->> 1)::int
     WHERE c.id = ANY(ARRAY(SELECT id FROM wf_total_locks)) AND c.shard = -1
 RETURNING c.target, c.remaining, c.failed, c.workflow
)"""


# What one statement's walk of the graph cancels before it hands the rest on (WorkflowCascade): at
# most WALK dependents, and no more than WALK_EDGES edges out of them to count, so what a finish adds
# to a batch, and what each step of the rest costs, is bounded whatever the graph's shape.
WALK = 200
WALK_EDGES = 2_000


def ended(rows: str | None, *, succeeded: bool = False) -> str:
    """The CTEs that follow ends of members (door.Change.ENDED): the WAITING dependents of the
    members that failed are cancelled (their error names an upstream that doomed them),
    transitively, within one statement's bound (WALK, WALK_EDGES), the rest handed on
    (WorkflowCascade); every end is counted, what waited on the ends is released, and a workflow
    whose count reaches zero ends and enqueues its callbacks.

    `rows` (id, status, workflow_id) are the jobs the statement ended. None: the statement ended
    none, and takes up members handed on earlier (`wf_picked`, cascade()): each is cancelled first
    if it still waits and still has an upstream that ended DEAD or CANCELLED (a replay may have
    reopened it since). What a statement hands on is the dependents it found and left: each member
    is handed on once and walked from once, so the whole cancel is linear in the graph.

    A callback already stored (the failure callback an earlier failure fired) is read, not inserted
    again: ON CONFLICT alone waits for the key's holder, and a finish ending that callback's job
    holds its key while it may wait for a count this statement has locked.

    `succeeded`: every member of `rows` ended in success (a finish of successes alone), so nothing
    is doomed and nothing fails: the walk, the cancels and the failure callbacks of a member's
    failure are left out of the statement, which then costs less to start on every call."""
    if succeeded and rows is not None:
        return _succeeded(rows)
    none = "SELECT NULL::uuid AS id, NULL::text AS status, NULL::uuid AS workflow_id WHERE false"
    doomed_step = (
        f"j.status = {S.WAITING} AND j.waiting_for IS NULL AND j.on_upstream_failure = {S.cancel}"
        " AND NOT ((SELECT m FROM wf_src_map) ? j.id::text)"
    )
    # Scalar subqueries and LATERAL probes by key, never EXISTS: a planner that pulls an EXISTS up into
    # a semi-join may scan the jobs once per edge when their statistics are stale.
    ended_upstream = f"(SELECT u.status FROM {JOB} u WHERE u.id = e.upstream) IN ({S.DEAD}, {S.CANCELLED})"
    if rows is None:
        src, start = none, none
        seeds = f"""SELECT j.id, j.status, j.workflow_id FROM {JOB} j
                     WHERE j.id = ANY(ARRAY(SELECT member FROM wf_picked)) AND j.status = {S.WAITING}
                       AND j.waiting_for IS NULL AND j.on_upstream_failure = {S.cancel}
                       AND (SELECT true FROM {EDGE} e WHERE e.target = j.id AND {ended_upstream} LIMIT 1)"""
        picked = "AND NOT ((SELECT m FROM wf_picked_map) ? e.target::text)"
        picked_map = f"""
wf_picked_map AS MATERIALIZED {_map("wf_picked", "member::text", "true")},"""
    else:
        src = f"SELECT id, status, workflow_id FROM {rows} WHERE workflow_id IS NOT NULL"
        start = f"SELECT id, status, workflow_id FROM wf_src WHERE status <> {S.SUCCEEDED}"
        seeds, picked, picked_map = none, "", ""
    cause = (
        "(SELECT m FROM wf_from_map) ? e.upstream::text OR (SELECT m FROM wf_doomed_map) ? e.upstream::text"
        f" OR {ended_upstream}"
    )
    return f"""wf_src AS MATERIALIZED ({src}),
wf_src_map AS MATERIALIZED {_map("wf_src", "id::text", "status")},
wf_from AS MATERIALIZED ({start}),
wf_from_map AS MATERIALIZED {_map("wf_from", "id::text", "status")},
wf_seeds AS MATERIALIZED ({seeds}),{picked_map}
wf_walk AS MATERIALIZED ({_walk("wf_from", doomed_step, WALK + 1, seeds="wf_seeds")}),
wf_doomed AS MATERIALIZED (
    SELECT id FROM (
        SELECT w.id, row_number() OVER () AS rank,
               sum((SELECT count(*) FROM {EDGE} e WHERE e.upstream = w.id)) OVER (ROWS UNBOUNDED PRECEDING) AS edges
          FROM wf_walk w
    ) sized
     WHERE rank <= {WALK} AND (rank = 1 OR edges <= {WALK_EDGES})
),
wf_doomed_map AS MATERIALIZED {_map("wf_doomed", "id::text", "true")},
wf_cause AS MATERIALIZED (
    SELECT d.id AS target,
           format('{UPSTREAM_CANCELLED} member %%s (%%s) ended %%s',
                  (SELECT u.member_name FROM {JOB} u WHERE u.id = c.upstream), c.upstream,
                  COALESCE((SELECT m FROM wf_from_map) ->> c.upstream::text,
                           (SELECT u.status FROM {JOB} u WHERE u.id = c.upstream
                                                          AND NOT ((SELECT m FROM wf_doomed_map) ? u.id::text)),
                           {S.CANCELLED})) AS message
      FROM wf_doomed d CROSS JOIN LATERAL (
          SELECT e.upstream FROM {EDGE} e WHERE e.target = d.id AND ({cause}) LIMIT 1) c
),
wf_cause_map AS MATERIALIZED {_map("wf_cause", "target::text", "message")},
wf_cancelled AS (
    UPDATE {JOB} j
       SET status = {S.CANCELLED}, finished_at = now(), updated_at = now(),
           last_error = (SELECT m FROM wf_cause_map) ->> j.id::text
     WHERE j.id = ANY(ARRAY(SELECT id FROM wf_doomed)) AND j.status = {S.WAITING}
 RETURNING j.id, j.status, j.workflow_id
),
wf_handed AS (
    INSERT INTO {CASCADE_TABLE} (member, workflow, created_at)
    SELECT DISTINCT j.id, f.workflow_id, now()
      FROM (SELECT id, workflow_id FROM wf_from UNION ALL SELECT id, workflow_id FROM wf_cancelled) f
     CROSS JOIN LATERAL (SELECT e.target FROM {EDGE} e WHERE e.upstream = f.id OFFSET 0) e
     CROSS JOIN LATERAL (SELECT j.id FROM {JOB} j WHERE j.id = e.target AND {doomed_step} OFFSET 0) j
     WHERE (SELECT count(*) FROM wf_walk) > (SELECT count(*) FROM wf_doomed)
       AND NOT ((SELECT m FROM wf_doomed_map) ? e.target::text) {picked}
    ON CONFLICT (member) DO NOTHING
 RETURNING member
),
wf_ended AS MATERIALIZED (
    SELECT id, status, workflow_id FROM wf_src UNION ALL SELECT id, status, workflow_id FROM wf_cancelled
),{_counted(failures=True)}"""


def _succeeded(rows: str) -> str:
    """ended() of `rows` that all succeeded: their ends counted, with nothing to cancel. What a count
    at zero decides (the release, the workflow's end, its callbacks) is left to zeroed_sql(), in the
    same transaction, and only when a count reached zero (ZEROS): a fan-in's members, each of whose
    ends takes one off a shard, do not start that part of the plan at every finish."""
    return f"""wf_src AS MATERIALIZED (SELECT id, status, workflow_id FROM {rows} WHERE workflow_id IS NOT NULL),
wf_ended AS MATERIALIZED (SELECT id, status, workflow_id FROM wf_src),{_ends_counted()}"""


# The counts a statement brought to zero (target, failed, workflow): the last column of a statement
# with ended(rows, succeeded=True), JSON on every row (NULL when none), for zeroed_sql().
ZEROS = "(SELECT jsonb_agg(jsonb_build_array(target, failed, workflow)) FROM wf_zero)"


def _ends_counted() -> str:
    """The counts of `wf_ended`'s ends (_recount), and `wf_zero`: those they brought to zero."""
    return f"""{_recount("wf_ended", ended=True)},
wf_zero AS MATERIALIZED (SELECT target, failed, workflow FROM wf_tops WHERE remaining = 0)"""


def zeroed_sql() -> str:
    """The statement that goes on from a successes' statement whose counts reached zero (ZEROS, its
    parameter), in its transaction, which still holds those counts' locks, so no other can decide
    them: the release of what waited on them, the workflow's end and its callbacks, as ended() does
    in one statement. The ends it counted are no longer WAITING, so none of them is released."""
    rows = "jsonb_array_elements(%s::jsonb) AS z"
    return f"""wf_zero AS MATERIALIZED (
    SELECT (z ->> 0)::uuid AS target, (z ->> 1)::int AS failed, (z ->> 2)::uuid AS workflow FROM {rows}
),
wf_opened_map AS MATERIALIZED (SELECT '{{}}'::jsonb AS m),{_decided(failures=False, after="true")}"""


def _counted(*, failures: bool) -> str:
    """What follows `wf_ended` (id, status, workflow_id): the counts, the release, the workflow's end
    and its callbacks. `failures`: some of the ends may have failed, and fire their workflow's
    failure callback at once."""
    return f"""{_ends_counted()},{_decided(failures=failures, after="(SELECT count(*) FROM wf_tops) >= 0")}"""


def _decided(*, failures: bool, after: str) -> str:
    """What the counts at zero of `wf_zero` decide (`wf_opened_map`: members whose own row must not be
    released): the release, the workflow's end, its callbacks. `after`: a condition of the
    callbacks' INSERT that makes it read its dedupe keys after the counts' locks are taken."""
    key = callback_key("f.workflow_id", "f.run", "f.event")
    failing = f"""
    UNION ALL
    SELECT w.id, w.run, 'failure', w.callbacks -> 'failure', w.dedupe_scope, w.submitted_by
      FROM {WORKFLOW} w
     WHERE w.id = ANY(ARRAY(SELECT DISTINCT workflow_id FROM wf_ended WHERE status <> {S.SUCCEEDED}))
       AND NOT (w.id = ANY(ARRAY(SELECT id FROM wf_done))) AND w.callbacks ? 'failure'"""
    return f"""
wf_zero_map AS MATERIALIZED {_map("wf_zero", "target::text", "failed")},
wf_release AS MATERIALIZED (
    SELECT j.id, j.queue, j.kind, j.priority, j.fair_key, j.fair_seq AS stride FROM {JOB} j
     WHERE j.id = ANY(ARRAY(SELECT target FROM wf_zero WHERE target <> workflow)) AND j.status = {S.WAITING}
       AND j.waiting_for IS NULL
       AND NOT ((SELECT m FROM wf_opened_map) ? j.id::text)
       AND (j.on_upstream_failure = {S.run} OR ((SELECT m FROM wf_zero_map) ->> j.id::text)::int = 0)
),{turns("wf_release")},
wf_released AS (
    UPDATE {JOB} j SET status = {S.PENDING}, run_at = GREATEST(j.run_at, now()), updated_at = now(),
           fair_seq = ((SELECT m FROM wf_turns) ->> j.id::text)::float8
     WHERE j.id = ANY(ARRAY(SELECT id FROM wf_release)) AND j.status = {S.WAITING}
 RETURNING j.id, pg_notify('{CHANNEL}', j.queue)
),
wf_done AS (
    UPDATE {WORKFLOW} w
       SET status = CASE WHEN w.cancel_requested_at IS NOT NULL THEN {S.CANCELLED}
                         WHEN ((SELECT m FROM wf_zero_map) ->> w.id::text)::int > 0 THEN {S.FAILED}
                         ELSE {S.SUCCEEDED} END,
           finished_at = now(), updated_at = now()
     WHERE w.id = ANY(ARRAY(SELECT target FROM wf_zero WHERE target = workflow))
 RETURNING w.id, w.run, w.status, w.callbacks, w.dedupe_scope, w.submitted_by
),
wf_fire AS MATERIALIZED (
    SELECT d.id AS workflow_id, d.run, ev.event, d.callbacks -> ev.event AS cb, d.dedupe_scope, d.submitted_by
      FROM wf_done d CROSS JOIN (VALUES ('success'), ('failure'), ('complete')) AS ev(event)
     WHERE d.callbacks ? ev.event
       AND (ev.event = 'complete' OR (ev.event = 'success') = (d.status = {S.SUCCEEDED})){failing if failures else ""}
),
wf_callbacks AS (
    INSERT INTO {JOB} (id, kind, queue, priority, payload, status, attempts, max_attempts, run_at, worker_id,
                       last_error, dedupe_key, dedupe_scope, submitted_by, workflow_id, created_at, updated_at,
                       fair_key, fair_seq)
    SELECT gen_random_uuid(), f.cb ->> 'kind', f.cb ->> 'queue', (f.cb ->> 'priority')::int,
           COALESCE(f.cb -> 'payload', '{{}}'::jsonb) || jsonb_build_object('workflow', f.workflow_id::text),
           {S.PENDING}, 0, (f.cb ->> 'max_attempts')::int, now(), '', '', {key},
           f.dedupe_scope, f.submitted_by, f.workflow_id, now(), now(), f.cb ->> 'fair_key',
           CASE WHEN f.cb ? 'stride' THEN {_CALLBACK_TURN} END
      FROM wf_fire f
     WHERE {after}
       AND (SELECT 1 FROM {JOB} k WHERE k.dedupe_scope = f.dedupe_scope AND k.dedupe_key = {key}) IS NULL
     ORDER BY f.workflow_id, f.event
    ON CONFLICT DO NOTHING
 RETURNING id, pg_notify('{CHANNEL}', queue)
)"""


def turns(release: str) -> str:
    """`wf_turns`: the fair turn of each member of `release` (id, queue, kind, priority, fair_key,
    stride) that has a stride (a member of a fair kind keeps its stride in fair_seq while it waits):
    its key's next turns, one stride apart, read once per (queue, kind, priority, key), as a batch's."""
    first = first_turn_sql(
        keyed=None, queue="g.queue", kind="g.kind", priority="g.priority", key="g.fair_key", stride="g.stride"
    )
    turns = f"""(SELECT r.id, t.first + r.stride * (row_number() OVER (
                    PARTITION BY r.queue, r.kind, r.priority, r.fair_key, r.stride ORDER BY r.id) - 1) AS seq
               FROM {release} r JOIN wf_turn_first t
                 ON t.queue = r.queue AND t.kind = r.kind AND t.priority = r.priority
                AND t.fair_key IS NOT DISTINCT FROM r.fair_key AND t.stride = r.stride) turns"""
    return f"""
wf_turn_first AS MATERIALIZED (
    SELECT g.queue, g.kind, g.priority, g.fair_key, g.stride, {first} AS first
      FROM (SELECT DISTINCT queue, kind, priority, fair_key, stride FROM {release} WHERE stride IS NOT NULL) g
),
wf_turns AS MATERIALIZED {_map(turns, "id::text", "seq")}"""


# A callback of a fair kind takes its turn as it is enqueued (its spec holds its key's stride).
_CALLBACK_TURN = first_turn_sql(
    keyed=None,
    queue="(f.cb ->> 'queue')",
    kind="(f.cb ->> 'kind')",
    priority="(f.cb ->> 'priority')::int",
    key="(f.cb ->> 'fair_key')",
    stride="(f.cb ->> 'stride')::float8",
)


def callback_key(workflow: str, run: str, event: str) -> str:
    """SQL: a callback's dedupe key, `workflow:<id>:<run>:<event>`, unique in its submitter's scope."""
    return f"'{CALLBACK_KEY_PREFIX}' || {workflow}::text || ':' || {run}::text || ':' || {event}"


def reopened(rows: str) -> str:
    """The CTEs a replay of a DEAD member adds to its statement (door.Change.REOPENED): the members
    its end cancelled wait again, the counts take them all back, and the workflow starts a new run.

    A member cancelled by an upstream stays cancelled if another of its failures is still there:
    a DEAD upstream other than this one, an operator's cancel, or an upstream that stays cancelled.
    The workflow's row is updated after the counts (its WHERE reads wf_tops), as the end's callbacks
    are inserted after them, in one order (by workflow, then event): CTEs run in no set order, and
    a finish holding a count may be waiting for that row, or for a callback's key."""
    by_upstream = f"j.status = {S.CANCELLED} AND j.last_error LIKE '{UPSTREAM_CANCELLED} %%'"
    everything = 2**31 - 1  # a replay walks as far as the graph goes (an operator's action, not a worker's)
    unblocked = f"{by_upstream} AND NOT ((SELECT m FROM wf_blocked_map) ? j.id::text)"
    return f"""wf_r AS MATERIALIZED (SELECT id, status, workflow_id FROM {rows} WHERE workflow_id IS NOT NULL),
wf_r_map AS MATERIALIZED {_map("wf_r", "id::text", "true")},
wf_blockers AS MATERIALIZED (
    SELECT u.id FROM {JOB} u
     WHERE u.workflow_id = ANY(ARRAY(SELECT DISTINCT workflow_id FROM wf_r)) AND u.member_name IS NOT NULL
       AND ((u.status = {S.DEAD} AND NOT ((SELECT m FROM wf_r_map) ? u.id::text))
            OR (u.status = {S.CANCELLED} AND u.last_error NOT LIKE '{UPSTREAM_CANCELLED} %%'))
),
wf_blocked AS MATERIALIZED ({_walk("wf_blockers", by_upstream, everything)}),
wf_blocked_map AS MATERIALIZED {_map("wf_blocked", "id::text", "true")},
wf_reach AS MATERIALIZED ({_walk("wf_r", unblocked, everything)}),
wf_rewaited AS (
    UPDATE {JOB} j SET status = {S.WAITING}, finished_at = NULL, last_error = '', updated_at = now()
     WHERE j.id = ANY(ARRAY(SELECT id FROM wf_reach)) AND j.status = {S.CANCELLED}
 RETURNING j.id, j.status, j.workflow_id
),
wf_opened AS MATERIALIZED (
    SELECT id, status, workflow_id FROM wf_r UNION ALL SELECT id, status, workflow_id FROM wf_rewaited
),{_recount("wf_opened", ended=False)},
wf_new_run AS (
    UPDATE {WORKFLOW} w SET run = w.run + 1, status = {S.RUNNING}, finished_at = NULL, cancel_requested_at = NULL,
           updated_at = now()
     WHERE w.id = ANY(ARRAY(SELECT DISTINCT workflow_id FROM wf_r))
       AND (SELECT count(*) FROM wf_tops) >= 0
 RETURNING w.id
)"""
