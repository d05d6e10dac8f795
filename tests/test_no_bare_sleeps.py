"""The suites never sleep bare: a test waits for a condition, polled in a loop with a deadline.

A sleep alone guesses how long something takes, which a loaded machine makes wrong (too short: a
flaky failure) or slow (too long). tests.support.wait_until polls; a sleep inside a `while` is such
a poll. The runners of chaos, failover and the bench pace their own load and are not suites' tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

SUITES = ("unit", "integration", "api", "acceptance", "admin", "charges", "fleet", "plans", "security", "tour")
TESTS = Path(__file__).resolve().parent


def bare_sleeps(source: str) -> list[int]:
    """Lines of `time.sleep(...)` / `sleep(...)` calls that no `while` loop encloses."""
    found: list[int] = []

    def visit(node: ast.AST, in_loop: bool) -> None:
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            base = node.func.value if isinstance(node.func, ast.Attribute) else None
            if name == "sleep" and not in_loop and not (isinstance(base, ast.Name) and base.id == "asyncio"):
                found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            # A function defined inside a loop is not polled by it; a string of code is not a call.
            inner = isinstance(child, ast.While) or (in_loop and not isinstance(child, ast.FunctionDef))
            visit(child, inner)

    visit(ast.parse(source), False)
    return found


def test_bare_sleep_is_found_and_a_poll_is_not() -> None:
    assert bare_sleeps("import time\ndef test():\n    time.sleep(0.5)\n") == [3]
    assert bare_sleeps("import time\nwhile not done():\n    time.sleep(0.05)\n") == []


def test_no_test_of_the_suites_sleeps_bare() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for suite in SUITES
        if (TESTS / suite).is_dir()
        for path in sorted((TESTS / suite).rglob("*.py"))
        for line in bare_sleeps(path.read_text(encoding="utf-8"))
    ]
    assert found == [], f"sleeps with no condition polled around them (use tests.support.wait_until): {found}"
