"""Only the queue layer (reliableq/queue/) talks SQL to a database.

No cursor opened, no RawSQL or .raw(, no psycopg.connect, no .execute( of SQL text anywhere else
in the package, migrations aside, but for the modules listed here: each says why, and a module
that no longer needs its entry fails the test until the entry goes, so the list can only shrink.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import ROOT

SQL = re.compile(r"\.cursor\b|\bRawSQL\b|\.raw\(|\bpsycopg2?\.connect\b|\.extra\(")
EXECUTE = {"execute", "executemany"}

ELSEWHERE = {
    # Not reliableq: the bundled charge service's own tables, in its own app.
    "charges/services.py": "the charge service's tables",
}


def sources() -> list[Path]:
    return [
        path
        for top in ("reliableq", "charges")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "migrations" not in path.parts and "queue" not in path.relative_to(ROOT / top).parts[:1]
    ]


def _executes_sql(tree: ast.AST) -> bool:
    """Whether the code calls .execute(...) / .executemany(...) with SQL text: a string literal, an
    f-string or a sum of them, as its first argument."""

    def text(node: ast.AST) -> bool:
        if isinstance(node, ast.BinOp):
            return text(node.left) or text(node.right)
        return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))

    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in EXECUTE
        and bool(node.args)
        and text(node.args[0])
        for node in ast.walk(tree)
    )


def talks_sql(source: str) -> bool:
    return bool(SQL.search(source)) or _executes_sql(ast.parse(source))


def test_the_check_sees_each_way_of_talking_sql():
    for code in (
        "with connection.cursor() as c: pass",
        "connections['default'].cursor()",
        "psycopg.connect(**params)",
        "conn.execute('LISTEN x')",
        "conn.execute(f'LISTEN {CHANNEL}')",
        "cursor.executemany('INSERT ' + rest, rows)",
        "Job.objects.raw('SELECT 1')",
        "Job.objects.annotate(x=RawSQL('1', []))",
    ):
        assert talks_sql(code), code
    assert not talks_sql("executor.execute(job)\nstatements.insert_one(row)")


def test_no_module_outside_the_queue_layer_talks_sql_but_the_listed_ones():
    talking = {str(path.relative_to(ROOT)) for path in sources() if talks_sql(path.read_text(encoding="utf-8"))}

    assert talking == set(ELSEWHERE), (
        f"SQL outside reliableq/queue: {sorted(talking - set(ELSEWHERE))}; "
        f"listed but no longer talking SQL (remove them): {sorted(set(ELSEWHERE) - talking)}"
    )


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal of the code (f-strings' parts included), docstrings left out."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_queue_layer_names_statuses_through_the_models_only():
    """A status or outcome typed into a statement by hand ('RUNNING') drifts from JobStatus unseen."""
    literal = re.compile(r"'(PENDING|RUNNING|SUCCEEDED|DEAD|CANCELLED|FAILED_TRANSIENT|FAILED_PERMANENT|TIMED_OUT"
                         r"|LEASE_EXPIRED|LEASE_LOST|SNOOZED)'")  # fmt: skip
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text.strip()[:100]}"
        for path in sorted((ROOT / "reliableq" / "queue").glob("*.py"))
        for line, text in _code_strings(ast.parse(path.read_text(encoding="utf-8")))
        if literal.search(text)
    ]
    assert found == [], "\n".join(found)
