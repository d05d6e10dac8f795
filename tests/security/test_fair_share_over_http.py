"""A fair kind over real HTTP: a submitter's jobs are shared as that submitter's, whatever it sends.

The attacks: name another tenant's fair_key to take its turns, or spread a flood over many keys
(trigger.dev's finding: a per-key cap does nothing against a tenant that uses many keys) so that
it takes more turns than a tenant with one job. Both are refused by construction: over HTTP the
key is the submitter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reliableq import queue as jobqueue
from reliableq import registry
from reliableq.models import Job

from .conftest import Client, Site, problem, start_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fair_kinds")]
SUBMIT = "reliableq.submit_job"


@pytest.fixture
def site(db_url: str, tmp_path: Path) -> Iterator[Site]:
    from testproject import processes

    live = start_site(tmp_path, db_url, RELIABLEQ_TEST_FAIR="1")
    try:
        yield live
    finally:
        processes.stop(live.process)


def test_a_submitter_cannot_name_a_fair_key_in_a_job_or_a_batch(client_of: Callable[..., Client]):
    attacker = client_of("attacker", SUBMIT)
    body = problem(attacker.submit({"kind": "test.fair", "payload": {}, "fair_key": "victim"}), 400)
    assert "fair_key cannot be set over HTTP" in body["errors"]["fair_key"][0]
    item = {"kind": "test.fair", "payload": {}, "fair_key": "user:1"}
    problem(attacker.request("POST", "/v1/jobs/batch", json={"jobs": [item]}), 400)
    assert not Job.objects.exists()


def test_a_flood_over_many_requests_is_one_key_and_another_users_job_runs_in_the_next_round(
    client_of: Callable[..., Client],
):
    attacker = client_of("attacker", SUBMIT)
    victim = client_of("victim", SUBMIT)
    for _ in range(3):
        answer = attacker.request("POST", "/v1/jobs/batch", json={"jobs": [{"kind": "test.fair", "payload": {}}] * 100})
        assert answer.status_code == 202, answer.text[:500]
    for n in range(20):
        assert attacker.submit({"kind": "test.fair", "payload": {"n": n}}).status_code == 202
    assert victim.submit({"kind": "test.fair", "payload": {}}).status_code == 202

    keys = dict(Job.objects.values_list("submitted_by", "fair_key").distinct())
    assert keys == {"attacker": f"user:{attacker.user.pk}", "victim": f"user:{victim.user.pk}"}
    claimed, _ = jobqueue.claim(
        worker_id="w", queues=["default"], limit=2, lease_seconds=30, limits=registry.limits(), rescue=False
    )
    assert sorted(Job.objects.filter(pk__in=[j.id for j in claimed]).values_list("submitted_by", flat=True)) == [
        "attacker",
        "victim",
    ]
