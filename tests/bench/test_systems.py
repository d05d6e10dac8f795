"""The harness loads its backlogs through the library's own API: a change of that API breaks a
scenario here, in seconds, rather than in the nightly run (the flow scenario's keyed backlog once
failed there on `NewJob(queue=...)` for a release)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import models

from reliableq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def flow_kinds() -> Iterator[None]:
    from bench.jobs import register_flow_kinds
    from reliableq import registry

    saved = dict(registry._handlers)
    register_flow_kinds()
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


@pytest.mark.parametrize("job", ["noop", "keyed"])
def test_the_reliableq_system_loads_each_scenarios_backlog(job: str, flow_kinds: None) -> None:
    from bench.systems import QUEUE, ReliableQ

    ReliableQ().load(30, job)
    rows = Job.objects.filter(queue=QUEUE)
    assert rows.count() == 30
    assert {row.kind for row in rows} == {ReliableQ.KINDS[job]}
    if job == "keyed":  # spread over the keys in order, so neighbours in the queue differ
        assert len({row.concurrency_key for row in rows}) > 1


@pytest.mark.parametrize("name", ["BarePsycopg", "DjangoCreate"])
def test_each_enqueue_ceiling_stores_the_row_enqueue_stores(name: str, flow_kinds: None) -> None:
    from bench import enqueue_ceilings
    from bench.systems import QUEUE, ReliableQ

    ceiling = getattr(enqueue_ceilings, name)()
    try:
        ceiling.enqueue("noop")
        ceiling.enqueue("noop", atomic=True)
        ceiling.enqueue_bulk(5)
    finally:
        ceiling.close()
    assert ceiling.outcome().total == 7
    made = Job.objects.filter(queue=QUEUE)
    assert {(j.kind, j.status, str(j.payload), j.attempts) for j in made} == {
        (ReliableQ.KINDS["noop"], "PENDING", "{}", 0)
    }
    assert made.filter(run_at=models.F("created_at")).count() == 7  # due now, by the database's clock
