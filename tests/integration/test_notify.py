"""Enqueue wakes idle workers with NOTIFY, delivered only when the enqueuing transaction commits."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import reliableq
from reliableq import services
from reliableq.queue import db

from .helpers import raw_connect

pytestmark = pytest.mark.django_db(transaction=True)


def notes(conn: psycopg.Connection[Any], wait: float) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in conn.notifies(timeout=wait, stop_after=10)]


def test_enqueue_notifies_its_queue_on_commit_only() -> None:
    with raw_connect(autocommit=True) as listener:
        listener.execute(f"LISTEN {services.CHANNEL}")
        with db.atomic():
            reliableq.enqueue("demo.noop", {}, queue="mail")
            assert notes(listener, 0.2) == []  # not before the commit
        assert notes(listener, 2.0) == [("reliableq", "mail")]


def test_a_rolled_back_enqueue_notifies_nobody() -> None:
    with raw_connect(autocommit=True) as listener:
        listener.execute(f"LISTEN {services.CHANNEL}")
        with pytest.raises(RuntimeError), db.atomic():
            reliableq.enqueue("demo.noop", {})
            raise RuntimeError("roll back")
        assert notes(listener, 0.5) == []


def test_a_job_for_later_and_a_deduplicated_one_wake_nobody() -> None:
    from django.utils import timezone

    reliableq.enqueue("demo.noop", {}, dedupe_key="once")
    with raw_connect(autocommit=True) as listener:
        listener.execute(f"LISTEN {services.CHANNEL}")
        reliableq.enqueue("demo.noop", {}, run_at=timezone.now() + timezone.timedelta(hours=1))
        reliableq.enqueue("demo.noop", {}, dedupe_key="once")
        assert notes(listener, 0.5) == []
