"""The statement index (reliableq.queue.statements, manage.py reliableq_statements) shows every
statement the door makes: a door statement added without a listed shape fails here."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from reliableq.queue import statements
from tests.support import ROOT

pytestmark = pytest.mark.django_db  # the ORM compiles a pick's FOR UPDATE inside a transaction; nothing is sent


def door_names_in_the_source() -> set[str]:
    """The name of every statement the door is asked to make: statement("name", ...) or
    statement("a" if x else "b", ...) anywhere in reliableq/queue/."""
    names: set[str] = set()
    for path in sorted((ROOT / "reliableq" / "queue").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called != "statement":
                continue
            first = node.args[0]
            options = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
            for option in options:
                assert isinstance(option, ast.Constant), f"{path.name}:{node.lineno}: a door name is a literal"
                names.add(option.value)
    return names


def test_every_statement_the_door_makes_is_listed() -> None:
    listed = statements.index()
    shown = {found for text in listed.values() for found in re.findall(r"/\* reliableq:(\w+) \*/", text)}
    made = door_names_in_the_source()
    assert {"claim", "finish", "rescue", "purge", "cancel", "replay", "cascade"} <= made
    assert made - shown == set(), "door statements with no listed shape: add them to statements.SHAPES"


def test_the_command_prints_a_statement_under_its_name_and_refuses_an_unknown_one() -> None:
    out = io.StringIO()
    call_command("reliableq_statements", "prune.PURGE_SQL", stdout=out)
    assert out.getvalue().startswith("-- prune.PURGE_SQL\n/* reliableq:purge */")

    names = io.StringIO()
    call_command("reliableq_statements", "--names-only", stdout=names)
    assert names.getvalue().split() == list(statements.index())

    with pytest.raises(CommandError, match="No statement named nope"):
        call_command("reliableq_statements", "nope")


# The calls that send a statement, by name, and the position of the statement among their arguments:
# a cursor's (Django's, psycopg's, a psycopg connection's), db.run/db.fetch, door.run, the plan guard's
# and the token lookup's helpers.
SENDS = {"execute": 0, "executemany": 0, "fetch": 0, "run": 1, "fetch_one": 1, "plan_of": 0, "keep_index": 0}
# (file, the start of the literal): the only statements that may be written where they are sent.
INLINE_ALLOWED = {
    ("planguard.py", "EXPLAIN (FORMAT JSON) "): "its text is the statement the caller hands it",
    ("planguard.py", "ANALYZE "): "its text is a table's name",
}


def inline_statements(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, the literal's start) of each str or f-string literal handed to a call that sends it."""
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            position = SENDS.get(called)
            if position is None:
                continue
            given = node.args[position] if len(node.args) > position else None
            if given is None:
                given = next((k.value for k in node.keywords if k.arg == "sql"), None)
            if isinstance(given, ast.JoinedStr):
                first = given.values[0] if given.values else None
                start = first.value if isinstance(first, ast.Constant) else ""
            elif isinstance(given, ast.Constant) and isinstance(given.value, str):
                start = given.value
            else:
                continue
            found.append((path.name, node.lineno, str(start).strip()))
    return found


def test_no_statement_is_sent_inline() -> None:
    """Every statement the layer sends is a module-level *_SQL (or made by a function listed in
    statements.SHAPES), so that the index shows it: a literal handed to execute() fails here."""
    inline = [
        (name, line, start)
        for name, line, start in inline_statements(ROOT / "reliableq" / "queue")
        if not any(name == file and start.startswith(prefix.strip()) for file, prefix in INLINE_ALLOWED)
    ]
    assert inline == [], "statements sent inline: move each to a module-level <WHAT>_SQL"


def test_the_inline_check_finds_a_literal(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        'def f(cursor, db, x):\n    cursor.execute("SELECT 1")\n    db.run(cursor, f"SELECT {x}", [])\n'
        "    cursor.execute(X_SQL)\n",
        encoding="utf-8",
    )
    assert inline_statements(tmp_path) == [("m.py", 2, "SELECT 1"), ("m.py", 3, "SELECT")]
