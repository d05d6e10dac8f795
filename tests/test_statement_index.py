"""The statement index (reliableq.queue.statements, manage.py reliableq_statements) shows every
statement the door makes: a door statement added without a listed shape fails here."""

from __future__ import annotations

import ast
import io
import re

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
