"""What must hold in PostgreSQL once the system has settled, each check one SQL query."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

JOB = "reliableq_job"
ATTEMPT = "reliableq_attempt"
CHARGE = "charges_charge"


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


def check(conn: psycopg.Connection[Any], *, concurrency: int) -> Report:
    report = Report()
    (total,) = conn.execute(f"SELECT count(*) FROM {JOB}").fetchone()  # type: ignore[misc]

    # 1. Nothing lost, nothing stuck: every job SUCCEEDED or DEAD.
    bad = _rows(conn, f"SELECT id, kind, status, attempts FROM {JOB} WHERE status NOT IN ('SUCCEEDED', 'DEAD')")
    report.add("terminal", total, bad, "job neither SUCCEEDED nor DEAD")

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
    return report
