"""The harness loads its backlogs through the library's own API: a change of that API breaks a
scenario here, in seconds, rather than in the nightly run (the flow scenario's keyed backlog once
failed there on `NewJob(queue=...)` for a release)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
