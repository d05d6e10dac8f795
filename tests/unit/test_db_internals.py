"""Pins what reliableq.queue.db relies on beyond Django's documented API (db.DJANGO_INTERNALS).

CI runs this on every supported Django version: a release that renames or drops one of them
fails here, by name, before a worker meets it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from django.db import connections

from reliableq.queue import db


def _resolve(dotted: str) -> type:
    module, name = dotted.rsplit(".", 1)
    found: type = getattr(importlib.import_module(module), name)
    return found


@pytest.mark.django_db
@pytest.mark.parametrize("owner", sorted(db.DJANGO_INTERNALS))
def test_every_django_internal_the_queue_layer_uses_is_there(owner: str) -> None:
    cls = _resolve(owner)
    # Attributes set in __init__ are looked for on a real wrapper and a real cursor.
    conn = connections[db.alias()]
    with conn.cursor() as cursor:
        instances = [found for found in (conn, cursor) if isinstance(found, cls)]
        missing = [
            name
            for name in db.DJANGO_INTERNALS[owner]
            if not hasattr(cls, name) and not any(hasattr(found, name) for found in instances)
        ]
    assert missing == [], f"{owner} no longer has {missing}: see reliableq.queue.db.DJANGO_INTERNALS"


def test_the_queue_layer_names_no_underscored_django_api() -> None:
    """Private names of Django (a leading underscore) are not relied on at all."""
    source = Path(db.__file__).read_text(encoding="utf-8")
    assert "._prepare_cursor" not in source and "type: ignore[attr-defined]" not in source
