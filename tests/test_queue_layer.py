"""Only the queue layer (reliableq/queue/) talks SQL to the queue's database.

No raw cursor, RawSQL or .raw( anywhere else in the package, migrations aside, but for the
modules listed here: each says why, and a module that no longer needs its entry fails the test
until the entry goes, so the list can only shrink.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import ROOT

SQL = re.compile(r"\.cursor\(|\bRawSQL\b|\.raw\(")

ELSEWHERE = {
    # Not the queue's tables: Django's auth and token tables, on the default database.
    "reliableq/api/authentication.py": "the token lookup, one statement on the default database",
    "reliableq/api/permissions.py": "a user's permissions in one statement, on the default database",
    "reliableq/api/tokenfunction.py": "the token lookup function's own check, on the default database",
    # Not the queue's tables: the bundled charge service's own.
    "charges/services.py": "the charge service's tables",
}


def sources() -> list[Path]:
    return [
        path
        for top in ("reliableq", "charges")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "migrations" not in path.parts and "queue" not in path.relative_to(ROOT / top).parts[:1]
    ]


def test_no_module_outside_the_queue_layer_talks_sql_but_the_listed_ones():
    talking = {str(path.relative_to(ROOT)) for path in sources() if SQL.search(path.read_text(encoding="utf-8"))}

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
