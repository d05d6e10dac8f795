"""The project as a whole: migrations are complete and the package ships its markers."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_models_and_migrations_agree() -> None:
    out = StringIO()
    # Exits with SystemExit(1) if a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", stdout=out)


def test_packages_ship_type_markers() -> None:
    assert (ROOT / "reliableq" / "py.typed").exists()
    assert (ROOT / "charges" / "py.typed").exists()


def test_migrations_are_named_by_hand() -> None:
    names = [p.stem for app in ("reliableq", "charges") for p in (ROOT / app / "migrations").glob("0*.py")]
    assert names
    assert not [n for n in names if "auto_" in n or n.endswith("_initial")], names
