"""What must hold in PostgreSQL once the system has settled, each check one SQL query."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.support import claims_of_workers, turns_left_behind

JOB = "reliableq_job"
ATTEMPT = "reliableq_attempt"
CHARGE = "charges_charge"
WORKFLOW = "reliableq_workflow"
EDGE = "reliableq_workflowedge"
COUNT = "reliableq_workflowcount"


@dataclass
class Report:
    checked: dict[str, int] = field(default_factory=dict)  # invariant -> rows examined
    violations: list[str] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {v.split(":")[0] for v in self.violations}

    def add(self, name: str, examined: int, bad: list[Any], describe: str) -> None:
        self.checked[name] = examined
        for row in bad[:20]:
            self.violations.append(f"{name}: {describe}: {row}")
        if len(bad) > 20:
            self.violations.append(f"{name}: ... and {len(bad) - 20} more")


def _rows(conn: psycopg.Connection[Any], sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()


PER_KEY_LIMIT = 2  # test.per_key's max_running_per_key
RATE_LIMIT = 10  # test.rated's starts per second


def check_workflows(conn: psycopg.Connection[Any], report: Report) -> None:
    """What the workflows' release and callbacks promise, once everything settled."""
    (members,) = conn.execute(f"SELECT count(*) FROM {JOB} WHERE member_name IS NOT NULL").fetchone()  # type: ignore[misc]
    (workflows,) = conn.execute(f"SELECT count(*) FROM {WORKFLOW}").fetchone()  # type: ignore[misc]
    # No attempt of a member started before each upstream member had succeeded (had ended, for a
    # member that runs on failure): release happens in the upstream's own finish, never earlier. A
    # member that ran on failure in an earlier run keeps that run's attempts, while its upstream's
    # record is of the last run: it is checked only in workflows that had one run.
    bad = _rows(
        conn,
        f"""
        SELECT d.member_name, a.number, u.member_name, d.on_upstream_failure
          FROM {EDGE} e JOIN {JOB} d ON d.id = e.target JOIN {JOB} u ON u.id = e.upstream
          JOIN {ATTEMPT} a ON a.job_id = d.id
         WHERE NOT EXISTS (
                SELECT 1 FROM {ATTEMPT} ua WHERE ua.job_id = u.id AND ua.finished_at <= a.started_at
                   AND (ua.outcome = 'SUCCEEDED' OR d.on_upstream_failure = 'run'))
           AND NOT (d.on_upstream_failure = 'run' AND u.status = 'CANCELLED' AND u.finished_at <= a.started_at)
           AND NOT (d.on_upstream_failure = 'run'
                    AND (SELECT w.run FROM {WORKFLOW} w WHERE w.id = d.workflow_id) > 1)
        """,
    )
    report.add("member_after_upstream", members, bad, "member attempt started before its upstream finished")
    # Each callback at most once per run (the unique key's job), and exactly once when its condition
    # held in the run the workflow ended with: complete always, success if it SUCCEEDED, failure if not.
    bad = _rows(
        conn,
        f"SELECT workflow_id, dedupe_key, count(*) FROM {JOB} WHERE workflow_id IS NOT NULL AND member_name IS NULL"
        " GROUP BY 1, 2 HAVING count(*) > 1",
    )
    report.add("callback_at_most_once", workflows, bad, "a callback enqueued twice in one run")
    bad = _rows(
        conn,
        f"""
        SELECT w.id, w.status, w.run, ev.event,
               (SELECT count(*) FROM {JOB} c WHERE c.workflow_id = w.id AND c.member_name IS NULL
                   AND c.dedupe_key = 'workflow:' || w.id::text || ':' || w.run || ':' || ev.event) AS fired
          FROM {WORKFLOW} w CROSS JOIN (VALUES ('success'), ('failure'), ('complete')) AS ev(event)
         WHERE w.status <> 'RUNNING' AND w.callbacks ? ev.event
           AND (SELECT count(*) FROM {JOB} c WHERE c.workflow_id = w.id AND c.member_name IS NULL
                   AND c.dedupe_key = 'workflow:' || w.id::text || ':' || w.run || ':' || ev.event)
               <> CASE WHEN ev.event = 'complete' THEN 1
                       WHEN ev.event = 'success' THEN (w.status = 'SUCCEEDED')::int
                       ELSE (w.status <> 'SUCCEEDED')::int END
        """,
    )
    report.add("callback_exactly_once", workflows, bad, "a callback missing, or fired though its condition failed")
    bad = _rows(
        conn,
        f"SELECT workflow_id, dedupe_key FROM {JOB} c WHERE c.member_name IS NULL AND c.workflow_id IS NOT NULL"
        f" AND c.dedupe_key LIKE '%%:success'"
        f" AND c.dedupe_key <> (SELECT 'workflow:' || w.id::text || ':' || w.run || ':success' FROM {WORKFLOW} w"
        " WHERE w.id = c.workflow_id)",
    )
    report.add("success_only_in_the_last_run", workflows, bad, "a success callback of a run that did not end it")
    # Nothing waits once a run is over, and no run is left open with every member finished.
    bad = _rows(
        conn,
        f"""
        SELECT w.id, w.status, j.member_name, j.status FROM {WORKFLOW} w JOIN {JOB} j ON j.workflow_id = w.id
         WHERE j.member_name IS NOT NULL
           AND ((w.status <> 'RUNNING' AND j.status IN ('WAITING', 'PENDING', 'RUNNING'))
                OR j.status = 'WAITING')
        """,
    )
    report.add("no_waiting_member", members, bad, "a member WAITING (or unfinished in a finished workflow)")
    bad = _rows(
        conn,
        f"SELECT w.id, w.run FROM {WORKFLOW} w WHERE w.status = 'RUNNING' AND NOT EXISTS ("
        f" SELECT 1 FROM {JOB} j WHERE j.workflow_id = w.id AND j.member_name IS NOT NULL"
        " AND j.status IN ('WAITING', 'PENDING', 'RUNNING'))",
    )
    report.add("workflow_ended", workflows, bad, "a workflow RUNNING though every member finished")
    bad = _rows(
        conn,
        f"SELECT c.target, c.shard, c.remaining FROM {COUNT} c JOIN {WORKFLOW} w ON w.id = c.workflow"
        " WHERE w.status <> 'RUNNING' AND c.remaining <> 0",
    )
    report.add("counts_settled", workflows, bad, "a finished workflow's count not at zero")


def check(
    conn: psycopg.Connection[Any],
    *,
    concurrency: int,
    pauses: list[tuple[Any, Any]] | tuple[()] = (),
    interrupted: set[str] | frozenset[str] = frozenset(),
    outages: list[Any] | tuple[()] = (),
    lease_seconds: float = 0.0,
    acknowledged: list[Any] | tuple[()] = (),
) -> Report:
    """Every invariant; `interrupted` names the workers killed, crashed or stopped, `outages` the
    database times when the database itself failed (a restart, backends terminated, a failover), and
    `acknowledged` the jobs whose commit returned or whose submission was answered 2xx."""
    report = Report()
    (total,) = conn.execute(f"SELECT count(*) FROM {JOB}").fetchone()  # type: ignore[misc]

    # 0. No acknowledged job missing: a failover to a synchronous standby keeps every commit that returned.
    ids = sorted({str(job_id) for job_id in acknowledged})
    bad = _rows(
        conn,
        f"SELECT a.id FROM unnest(%s::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM {JOB} j WHERE j.id = a.id)",
        ids,
    )
    report.add("acknowledged_present", len(ids), bad, "acknowledged job missing")

    # 1. Nothing lost, nothing stuck: every job SUCCEEDED or DEAD, or CANCELLED because someone asked.
    bad = _rows(
        conn,
        f"SELECT id, kind, status, attempts FROM {JOB} WHERE status NOT IN ('SUCCEEDED', 'DEAD')"
        " AND NOT (status = 'CANCELLED' AND cancel_requested_at IS NOT NULL)"
        " AND NOT (status = 'CANCELLED' AND member_name IS NOT NULL AND last_error LIKE 'upstream %%')",
    )
    report.add("terminal", total, bad, "job neither SUCCEEDED nor DEAD (nor CANCELLED on request or by its upstream)")

    # 2. At most one charge per effect key; exactly one for every SUCCEEDED charge job, of the right amount.
    bad = _rows(conn, f"SELECT idempotency_key, count(*) FROM {CHARGE} GROUP BY 1 HAVING count(*) > 1")
    report.add("one_charge_per_key", total, bad, "several charges for one key")
    bad = _rows(
        conn,
        f"""
        SELECT j.id, count(c.id), min(c.amount), (j.payload->>'amount')::bigint
          FROM {JOB} j LEFT JOIN {CHARGE} c ON c.idempotency_key = 'reliableq:charge:' || j.id
         WHERE j.kind = 'charge' AND j.status = 'SUCCEEDED'
         GROUP BY j.id, j.payload
        HAVING count(c.id) <> 1 OR min(c.amount) <> (j.payload->>'amount')::bigint
        """,
    )
    report.add("succeeded_charge_committed_once", total, bad, "SUCCEEDED charge job without exactly one charge")

    # 3. No finalization by a stale token: the final state was written by the last attempt.
    bad = _rows(
        conn,
        f"""
        SELECT j.id, j.status, a.number AS last, a.outcome,
               (SELECT count(*) FROM {ATTEMPT} s WHERE s.job_id = j.id AND s.outcome = 'SUCCEEDED') AS successes
          FROM {JOB} j
          JOIN {ATTEMPT} a ON a.job_id = j.id AND a.number = j.attempts
         WHERE (j.status = 'SUCCEEDED' AND (a.outcome <> 'SUCCEEDED'
                 OR (SELECT count(*) FROM {ATTEMPT} s WHERE s.job_id = j.id AND s.outcome = 'SUCCEEDED') <> 1))
            OR (j.status = 'DEAD' AND (a.outcome NOT IN ('FAILED_TRANSIENT', 'FAILED_PERMANENT', 'TIMED_OUT',
                                                         'LEASE_EXPIRED', 'LEASE_LOST')
                 OR EXISTS (SELECT 1 FROM {ATTEMPT} s WHERE s.job_id = j.id AND s.outcome = 'SUCCEEDED')))
        """,
    )
    report.add("final_state_by_last_token", total, bad, "final state not written by the last attempt")
    bad = _rows(conn, f"SELECT job_id, number FROM {ATTEMPT} WHERE outcome = 'RUNNING' OR finished_at IS NULL")
    report.add("attempts_closed", total, bad, "attempt left open")
    bad = _rows(conn, f"SELECT id, status FROM {JOB} WHERE lease_token IS NOT NULL OR lease_expires_at IS NOT NULL")
    report.add("no_lease_left", total, bad, "finished job still holds a lease")

    # 4. Attempts within budget, every one recorded.
    bad = _rows(
        conn,
        f"""
        SELECT j.id, j.attempts, j.max_attempts, count(a.id), min(a.number), max(a.number)
          FROM {JOB} j LEFT JOIN {ATTEMPT} a ON a.job_id = j.id
         GROUP BY j.id
        HAVING j.attempts > j.max_attempts OR count(a.id) <> j.attempts
            OR (j.attempts > 0 AND (min(a.number) <> 1 OR max(a.number) <> j.attempts))
        """,
    )
    report.add("budget_and_history", total, bad, "attempts over budget or history incomplete")

    # 5. Every DEAD job says why.
    bad = _rows(conn, f"SELECT id, kind FROM {JOB} WHERE status = 'DEAD' AND last_error = ''")
    report.add("dead_has_error", total, bad, "DEAD job without an error")

    # 6. Per worker, handlers in flight never above its concurrency (a sweep over attempt intervals).
    bad = _rows(
        conn,
        f"""
        WITH edges AS (
            SELECT worker_id, started_at AS at, 1 AS delta FROM {ATTEMPT}
            UNION ALL
            SELECT worker_id, finished_at, -1 FROM {ATTEMPT} WHERE finished_at IS NOT NULL
        ),
        running AS (
            SELECT worker_id, at,
                   sum(delta) OVER (PARTITION BY worker_id ORDER BY at, delta
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS in_flight
              FROM edges
        )
        SELECT worker_id, max(in_flight) FROM running GROUP BY worker_id HAVING max(in_flight) > %s
        """,
        concurrency,
    )
    report.add("in_flight_within_concurrency", total, bad, f"worker above --concurrency {concurrency}")
    _flow_control(conn, report, total, pauses)

    # 12. Under process isolation a lease expires only when its worker does: never because a child
    # beside it died. An expired attempt of an isolated kind must have a worker that was killed,
    # crashed or stopped, or have been running when the database failed (a lease and a half later).
    bad = _rows(
        conn,
        f"""
        SELECT a.job_id, a.number, a.worker_id, j.kind, a.started_at FROM {ATTEMPT} a JOIN {JOB} j ON j.id = a.job_id
         WHERE a.outcome = 'LEASE_EXPIRED' AND j.kind LIKE 'chaos.isolated%%'
           AND a.worker_id <> ALL(%s)
           AND NOT EXISTS (SELECT 1 FROM unnest(%s::timestamptz[]) AS o(began)
                            WHERE o.began BETWEEN a.started_at - make_interval(secs => %s) AND a.finished_at)
        """,
        sorted(interrupted),
        list(outages),
        lease_seconds * 1.5,
    )
    (isolated,) = conn.execute(  # type: ignore[misc]
        f"SELECT count(*) FROM {ATTEMPT} a JOIN {JOB} j ON j.id = a.job_id WHERE j.kind LIKE 'chaos.isolated%%'"
    ).fetchone()
    report.add("isolated_lease_outlives_a_dead_child", isolated, bad, "isolated attempt expired, its worker alive")
    check_workflows(conn, report)
    check_fair_turns(conn, report, concurrency)
    return report


def check_fair_turns(conn: psycopg.Connection[Any], report: Report, concurrency: int) -> None:
    """test.fair's claims took the next turns nobody held (claims racing, workers stopped and killed):
    the turns a claim passed over, left to claims begun after it returned, are at most a claim's
    tokens (its free slots, at most `concurrency`) per claim overlapping it (tests.support). Claims
    are first attempts grouped by worker and start; a job's later attempts keep its turn."""
    rows = _rows(
        conn,
        f"SELECT a.worker_id, a.started_at, r.rank FROM {ATTEMPT} a JOIN ("
        f"SELECT id, row_number() OVER (ORDER BY priority, fair_seq, id) AS rank FROM {JOB}"
        " WHERE kind = 'test.fair') r ON r.id = a.job_id WHERE a.number = 1",
    )
    bad = turns_left_behind(claims_of_workers(rows), tokens=concurrency)
    report.add("fair_turns", len(rows), bad, "a claim passed over more turns than the claims beside it held")


def _flow_control(conn: psycopg.Connection[Any], report: Report, total: int, pauses: Any) -> None:
    # 7. Per concurrency key, RUNNING attempts of test.per_key never above its limit (a sweep).
    bad = _rows(
        conn,
        f"""
        WITH attempts AS (
            SELECT j.concurrency_key AS key, a.started_at, a.finished_at
              FROM {ATTEMPT} a JOIN {JOB} j ON j.id = a.job_id WHERE j.kind = 'test.per_key'
        ),
        edges AS (
            SELECT key, started_at AS at, 1 AS delta FROM attempts
            UNION ALL
            SELECT key, finished_at, -1 FROM attempts WHERE finished_at IS NOT NULL
        ),
        running AS (
            SELECT key, sum(delta) OVER (PARTITION BY key ORDER BY at, delta
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS in_flight
              FROM edges
        )
        SELECT key, max(in_flight) FROM running GROUP BY key HAVING max(in_flight) > %s
        """,
        PER_KEY_LIMIT,
    )
    report.add("per_key_within_limit", total, bad, f"more than {PER_KEY_LIMIT} RUNNING for one concurrency_key")

    # 8. Any one-second window holds at most RATE_LIMIT starts of test.rated.
    bad = _rows(
        conn,
        f"""
        WITH starts AS (
            SELECT a.started_at FROM {ATTEMPT} a JOIN {JOB} j ON j.id = a.job_id WHERE j.kind = 'test.rated'
        )
        SELECT s.started_at, (SELECT count(*) FROM starts t
                               WHERE t.started_at >= s.started_at AND t.started_at < s.started_at + interval '1 second')
          FROM starts s
         WHERE (SELECT count(*) FROM starts t
                 WHERE t.started_at >= s.started_at AND t.started_at < s.started_at + interval '1 second') > %s
        """,
        RATE_LIMIT,
    )
    report.add("rate_within_limit", total, bad, f"more than {RATE_LIMIT} starts of test.rated in one second")

    # 9. A snooze gives its attempt back: one SNOOZED attempt per snooze, the budget grown by as many.
    bad = _rows(
        conn,
        f"""
        SELECT j.id, j.snoozes, j.max_attempts, (j.payload->>'budget')::int,
               (SELECT count(*) FROM {ATTEMPT} a WHERE a.job_id = j.id AND a.outcome = 'SNOOZED')
          FROM {JOB} j
         WHERE j.kind = 'test.snooze'
           AND (j.max_attempts <> (j.payload->>'budget')::int + j.snoozes
                OR j.snoozes <> (SELECT count(*) FROM {ATTEMPT} a WHERE a.job_id = j.id AND a.outcome = 'SNOOZED'))
        """,
    )
    report.add("snooze_spends_no_attempt", total, bad, "snoozes and budget disagree")

    # 10. Nothing CANCELLED without a request (or, a workflow's member, without a failed upstream member:
    # it never ran); what was cancelled was stopped by its handler or its lease.
    bad = _rows(
        conn,
        f"""
        SELECT j.id, j.cancel_requested_at, a.outcome FROM {JOB} j
          LEFT JOIN {ATTEMPT} a ON a.job_id = j.id AND a.number = j.attempts
         WHERE j.status = 'CANCELLED'
           AND (j.cancel_requested_at IS NULL OR a.outcome NOT IN ('CANCELLED', 'LEASE_EXPIRED'))
           AND NOT (j.member_name IS NOT NULL AND j.last_error LIKE 'upstream %%' AND j.cancel_requested_at IS NULL
                    AND EXISTS (SELECT 1 FROM {EDGE} e JOIN {JOB} u ON u.id = e.upstream
                                 WHERE e.target = j.id AND u.status IN ('DEAD', 'CANCELLED')))
        """,
    )
    report.add("cancelled_on_request", total, bad, "CANCELLED without a request or by another path")

    # 11. No attempt of the paused queue started while it was paused.
    examined, bad = 0, []
    for paused_from, resumed_at in pauses:
        if resumed_at is None:
            continue
        examined += 1
        bad += _rows(
            conn,
            f"SELECT a.job_id, a.started_at FROM {ATTEMPT} a JOIN {JOB} j ON j.id = a.job_id"
            " WHERE j.queue = 'default' AND a.started_at > %s AND a.started_at < %s",
            paused_from,
            resumed_at,
        )
    report.add("no_claim_while_paused", examined, bad, "attempt started while its queue was paused")


STEP = "reliableq_step"
EVENT = "reliableq_event"
THREE_STEPS = ("steps.three", "steps.three_async", "steps.three_isolated")
WAITERS = ("steps.waiter", "steps.waiter_async", "steps.waiter_isolated")
SLEEPERS = ("steps.sleeper", "steps.sleeper_async")


def step_runs(log: Path) -> list[tuple[str, str, int]]:
    """(job, step, attempt) of each run of a step's function, as testproject.jobs.ran logged it."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [(job, name, int(attempt)) for job, name, attempt in (line.split() for line in lines if line.strip())]


def check_steps(
    conn: psycopg.Connection[Any],
    report: Report,
    *,
    step_log: Path,
    emits: list[dict[str, Any]],
    unemitted: list[str],
) -> None:
    """What durable steps, sleeps and waits promise: `step_log` holds every run of a step's function,
    `emits` what each of the driver's emits answered (committed, or rolled back), `unemitted` the
    names waited for that were never emitted."""
    runs = step_runs(step_log)
    conn.execute("CREATE TEMPORARY TABLE chaos_run (job_id uuid, name text, attempt int) ON COMMIT PRESERVE ROWS")
    with conn.cursor() as cursor:
        cursor.executemany("INSERT INTO chaos_run VALUES (%s, %s, %s)", runs)
    kinds = list(THREE_STEPS + WAITERS + SLEEPERS)
    (jobs,) = conn.execute(f"SELECT count(*) FROM {JOB} WHERE kind = ANY(%s)", (kinds,)).fetchone()  # type: ignore[misc]
    (recorded,) = conn.execute(f"SELECT count(*) FROM {STEP} WHERE kind = 'STEP'").fetchone()  # type: ignore[misc]

    # 13. A step runs at least once, and never again once recorded: the attempt that recorded it ran its
    # function once, and no later attempt ran it. (An earlier attempt may have run it and died before
    # its record committed; a stale one, its lease lost, may run it and fail to record it.)
    bad = _rows(
        conn,
        f"""
        SELECT s.job_id, s.name, s.attempt,
               (SELECT array_agg(r.attempt ORDER BY r.attempt) FROM chaos_run r
                 WHERE r.job_id = s.job_id AND r.name = s.name) AS runs
          FROM {STEP} s
         WHERE s.kind = 'STEP'
           AND ((SELECT count(*) FROM chaos_run r WHERE r.job_id = s.job_id AND r.name = s.name
                   AND r.attempt = s.attempt) <> 1
                OR EXISTS (SELECT 1 FROM chaos_run r WHERE r.job_id = s.job_id AND r.name = s.name
                              AND r.attempt > s.attempt))
        """,
    )
    report.add("step_recorded_runs_once", recorded, bad, "a recorded step's function ran again (or never)")
    # A SUCCEEDED three-step job recorded its three steps and returned their values.
    bad = _rows(
        conn,
        f"""
        SELECT j.id, j.kind, (SELECT array_agg(s.name) FROM {STEP} s WHERE s.job_id = j.id AND s.kind = 'STEP')
          FROM {JOB} j LEFT JOIN reliableq_returnvalue r ON r.job_id = j.id
         WHERE j.kind = ANY(%s) AND j.status = 'SUCCEEDED'
           AND ((SELECT count(*) FROM {STEP} s WHERE s.job_id = j.id AND s.kind = 'STEP') <> 3
                OR r.value IS DISTINCT FROM '["one", "two", "three"]'::jsonb)
        """,
        list(THREE_STEPS),
    )
    report.add("steps_all_recorded", jobs, bad, "a SUCCEEDED three-step job without its three steps and values")

    # 14. A sleep or a wait gives its attempt back: one SNOOZED attempt each time, the budget grown by as
    # many; and a SUCCEEDED sleeper slept: its sleep recorded, and passed no earlier than its end. (It
    # may have slept with no SNOOZED attempt: one that recorded the sleep and lost its lease, the next
    # attempt coming after the sleep's end.)
    bad = _rows(
        conn,
        f"""
        SELECT j.id, j.kind, j.snoozes, j.max_attempts, (j.payload->>'budget')::int,
               (SELECT count(*) FROM {ATTEMPT} a WHERE a.job_id = j.id AND a.outcome = 'SNOOZED')
          FROM {JOB} j
         WHERE j.kind = ANY(%s)
           AND (j.max_attempts <> (j.payload->>'budget')::int + j.snoozes
                OR j.snoozes <> (SELECT count(*) FROM {ATTEMPT} a WHERE a.job_id = j.id AND a.outcome = 'SNOOZED')
                OR (j.kind = ANY(%s) AND j.status = 'SUCCEEDED'
                    AND NOT EXISTS (SELECT 1 FROM {STEP} s JOIN {ATTEMPT} a ON a.job_id = s.job_id
                                     WHERE s.job_id = j.id AND s.kind = 'SLEEP' AND a.outcome = 'SUCCEEDED'
                                       AND a.finished_at >= to_timestamp((s.value->>'until')::float8))))
        """,
        list(WAITERS + SLEEPERS),
        list(SLEEPERS),
    )
    report.add("sleep_spends_no_attempt", jobs, bad, "sleeps or waits and budget disagree")

    # 15. No job woken twice by one emit: per name, the emits that committed woke at most as many jobs as
    # wait for the name, and a second emit of a name woke none. No rolled-back emit left its event.
    committed = [e for e in emits if not e["rollback"]]
    bad = _rows(
        conn,
        f"""
        SELECT e.name, sum(e.woken), (SELECT count(*) FROM {JOB} j WHERE j.kind = ANY(%s)
                                       AND j.payload->>'event' = e.name), bool_or(NOT e.made AND e.woken > 0)
          FROM jsonb_to_recordset(%s::jsonb) AS e(name text, woken int, made bool)
         GROUP BY e.name
        HAVING sum(e.woken) > (SELECT count(*) FROM {JOB} j WHERE j.kind = ANY(%s) AND j.payload->>'event' = e.name)
            OR bool_or(NOT e.made AND e.woken > 0) OR count(*) FILTER (WHERE e.made) > 1
        """,
        list(WAITERS),
        json.dumps(committed),
        list(WAITERS),
    )
    rolled = [e["name"] for e in emits if e["rollback"]]
    bad += _rows(conn, f"SELECT name, 'rolled back, yet recorded' FROM {EVENT} WHERE name = ANY(%s)", rolled)
    report.add("woken_once_per_emit", len(emits), bad, "an emit woke a job twice, or a rolled-back one stayed")

    # 16. No waiting job lost: a waiter whose event was emitted ran after the emit (an attempt that ended
    # after it began: one that started before may read the event once it committed) and, if it SUCCEEDED,
    # returned the event's payload; no attempt that started once the emit's commit had returned waited
    # again; and a waiter whose event never came timed out.
    bad = _rows(
        conn,
        f"""
        SELECT j.id, j.kind, j.status, e.name, e.payload, r.value
          FROM {JOB} j JOIN {EVENT} e ON e.name = j.payload->>'event'
          LEFT JOIN reliableq_returnvalue r ON r.job_id = j.id
         WHERE j.kind = ANY(%s)
           AND (NOT EXISTS (SELECT 1 FROM {ATTEMPT} a WHERE a.job_id = j.id AND a.finished_at >= e.emitted_at)
                OR (j.status = 'SUCCEEDED' AND r.value IS DISTINCT FROM e.payload))
        """,
        list(WAITERS),
    )
    bad += _rows(
        conn,
        f"""
        SELECT j.id, j.kind, a.number, a.started_at, e.acked
          FROM {JOB} j JOIN jsonb_to_recordset(%s::jsonb) AS e(name text, acked timestamptz)
                        ON e.name = j.payload->>'event'
          JOIN {ATTEMPT} a ON a.job_id = j.id
         WHERE j.kind = ANY(%s) AND a.outcome = 'SNOOZED' AND a.started_at > e.acked
        """,
        json.dumps(committed),
        list(WAITERS),
    )
    bad += _rows(
        conn,
        f"""
        SELECT j.id, j.kind, j.status, r.value FROM {JOB} j LEFT JOIN reliableq_returnvalue r ON r.job_id = j.id
         WHERE j.kind = ANY(%s) AND j.payload->>'event' = ANY(%s)
           AND (j.status <> 'SUCCEEDED' OR r.value IS DISTINCT FROM '"timed out"'::jsonb)
        """,
        list(WAITERS),
        unemitted,
    )
    (waiters,) = conn.execute(f"SELECT count(*) FROM {JOB} WHERE kind = ANY(%s)", (list(WAITERS),)).fetchone()  # type: ignore[misc]
    report.add("no_waiting_job_lost", waiters, bad, "a waiter not run after its event, or woken wrongly")
    conn.execute("DROP TABLE chaos_run")
