"""EXPLAIN (ANALYZE, BUFFERS) of the statements that the code really sends, and what a plan cost.

`capture()` installs an execute wrapper: every statement the code sends is first run under
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) in a savepoint that is rolled back, then run for
real, so the caller goes on as usual and the test gets the plan of each statement.

`capture(generic=True)` explains the generic plan instead: the one PostgreSQL may settle on for a
statement the worker prepares (reliableq.queue.db.run) after its first five executions, made
without the parameters' values.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from psycopg import sql as sql_
from psycopg._queries import PostgresQuery  # the text psycopg prepares a statement under

from reliableq.models import Job
from reliableq.queue import db

JOB = Job._meta.db_table
SKIPPED = ("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT", "SET ", "SHOW ", "EXPLAIN")


@dataclass(slots=True)
class Plan:
    sql: str
    plan: dict[str, Any]  # the JSON document EXPLAIN returns, first element
    generic: bool = False  # the plan made without the parameters' values (a prepared statement's)

    @property
    def root(self) -> dict[str, Any]:
        return self.plan["Plan"]

    @property
    def ms(self) -> float:
        return float(self.plan["Execution Time"])

    @property
    def buffers(self) -> int:
        """Shared buffers hit and read by the whole execution (planning not included).

        A node's counts include its children's. A data-modifying CTE that nothing reads runs
        after the main plan, so it is not inside the root's counts: add it.
        """
        total = _buffers(self.root)
        scanned = {node.get("CTE Name") for node in nodes(self.root) if node.get("Node Type") == "CTE Scan"}
        for sub in self.root.get("Plans", []):
            name = sub.get("Subplan Name", "")
            if name.startswith("CTE ") and name[4:] not in scanned:
                total += _buffers(sub)
        return total

    def scans(self, relation: str = JOB) -> list[str]:
        """'Node Type [index]' of every node that reads `relation`."""
        return [
            f"{node['Node Type']} {node.get('Index Name', '')}".strip()
            for node in nodes(self.root)
            if node.get("Relation Name") == relation and "Scan" in node["Node Type"]
        ]

    def rows_read(self, relation: str) -> int:
        """Rows of `relation` that the scans of this plan looked at: returned, filtered out or rechecked."""
        total = 0
        for node in nodes(self.root):
            # A bitmap index scan names only its index; this project's indexes start with their table's name.
            bitmap = node["Node Type"] == "Bitmap Index Scan" and node.get("Index Name", "").startswith(f"{relation}_")
            if bitmap or (node.get("Relation Name") == relation and "Scan" in node["Node Type"]):
                seen = (
                    float(node.get("Actual Rows", 0))
                    + float(node.get("Rows Removed by Filter", 0))
                    + float(node.get("Rows Removed by Index Recheck", 0))
                )
                total += round(seen * float(node.get("Actual Loops", 1)))
        return total

    def unbounded_joins(self) -> list[str]:
        """Nested loops whose inner side scans a whole index or table with a join filter (the quadratic shape)."""
        found = []
        for node in nodes(self.root):
            if node.get("Node Type") == "Nested Loop" and node.get("Join Filter"):
                inner = node["Plans"][1]
                whole = inner.get("Node Type") in ("Index Scan", "Index Only Scan", "Seq Scan")
                if whole and "Index Cond" not in inner:
                    found.append(f"{node['Join Filter']} over {inner['Node Type']} {inner.get('Index Name', '')}")
        return found

    def text(self) -> str:
        """A short outline of the plan, for assertion messages and the closing note."""
        lines = []

        def walk(node: dict[str, Any], depth: int) -> None:
            what = node["Node Type"]
            if "Relation Name" in node:
                what += f" on {node['Relation Name']}"
            if "Index Name" in node:
                what += f" using {node['Index Name']}"
            if "CTE Name" in node:
                what += f" of {node['CTE Name']}"
            for key in ("Index Cond", "Join Filter", "Hash Cond", "Filter"):
                if key in node:
                    what += f" [{key}: {node[key]}]"
            lines.append(
                f"{'  ' * depth}{node.get('Subplan Name', '') + ': ' if 'Subplan Name' in node else ''}{what} "
                f"(rows={node.get('Actual Rows')} est={node.get('Plan Rows')} loops={node.get('Actual Loops')} "
                f"buffers={_buffers(node)})"
            )
            for child in node.get("Plans", []):
                walk(child, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)


def _buffers(node: dict[str, Any]) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def explain(sql: str, params: Any = ()) -> Plan:
    """EXPLAIN ANALYZE one statement in a savepoint that is rolled back: it changes nothing."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        document = cursor.fetchone()[0]
        transaction.set_rollback(True)
    document = json.loads(document) if isinstance(document, str) else document
    return Plan(sql=sql, plan=document[0])


@dataclass(slots=True)
class Captured:
    plans: list[Plan] = field(default_factory=list)

    def only(self) -> Plan:
        [plan] = self.plans
        return plan


_quiet = [False]


@contextmanager
def quiet() -> Iterator[None]:
    """Statements of the test itself (finding rows to act on): run them, do not explain them."""
    _quiet[0] = True
    try:
        yield
    finally:
        _quiet[0] = False


@contextmanager
def capture(*, generic: bool = False) -> Iterator[Captured]:
    """Explain every statement the code sends inside this block, then let it run as usual."""
    captured = Captured()
    busy = False

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        nonlocal busy
        if busy or _quiet[0] or many or sql.lstrip().upper().startswith(SKIPPED):
            return execute(sql, params, many, context)
        busy = True
        try:
            # Generic plans only for the statements the worker prepares (reliableq.queue.db.run).
            explain = _explain_generic if generic and db.preparing.get() else _explain_here
            captured.plans.append(explain(execute, sql, params, context))
        finally:
            busy = False
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield captured


def _explain_here(execute: Any, sql: str, params: Any, context: dict[str, Any]) -> Plan:
    with transaction.atomic():
        execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params, False, context)
        document = context["cursor"].fetchone()[0]
        transaction.set_rollback(True)
    document = json.loads(document) if isinstance(document, str) else document
    return Plan(sql=sql, plan=document[0])


def _explain_generic(execute: Any, sql: str, params: Any, context: dict[str, Any]) -> Plan:
    """The generic plan of a statement: prepared as the worker prepares it (psycopg, the parameters'
    types from their values), then EXPLAIN EXECUTE under force_generic_plan."""
    raw = context["cursor"].cursor  # psycopg's cursor under Django's
    connection_ = raw.connection
    with transaction.atomic():
        execute("SET LOCAL plan_cache_mode = force_generic_plan", None, False, context)
        threshold, connection_.prepare_threshold = connection_.prepare_threshold, 2**31 - 1
        try:
            raw.execute(sql, params, prepare=True)
        finally:
            connection_.prepare_threshold = threshold  # psycopg prepares nothing more on this connection
        # Found by its text as psycopg sent it ($n placeholders), not as the newest: two statements
        # prepared in one transaction have the same prepare_time, and one prepared earlier on this
        # connection is not prepared again.
        query = PostgresQuery(raw._tx)
        query.convert(sql, params)
        raw.execute(
            "SELECT name, parameter_types::text[] FROM pg_prepared_statements WHERE NOT from_sql AND statement = %s",
            [query.query.decode()],
        )
        name, types = raw.fetchone()
        # A utility statement (EXPLAIN) takes no bound parameters: the values go in as literals.
        values = [v.value if isinstance(v, enum.Enum) else v for v in params or ()]
        arguments = ", ".join(
            f"({sql_.Literal(v).as_string(connection_)})::{t}" for v, t in zip(values, types, strict=True)
        )
        run = f"EXECUTE {name}({arguments})" if types else f"EXECUTE {name}"
        transaction.set_rollback(True)
    with transaction.atomic():
        execute("SET LOCAL plan_cache_mode = force_generic_plan", None, False, context)
        execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {run}", None, False, context)
        document = context["cursor"].fetchone()[0]
        transaction.set_rollback(True)
    document = json.loads(document) if isinstance(document, str) else document
    return Plan(sql=sql, plan=document[0], generic=True)
