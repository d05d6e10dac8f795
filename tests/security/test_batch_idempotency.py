"""Issue 25, points 3 and 6: an Idempotency-Key covers a whole batch, and a key is never left unbound.

Before: POST /v1/jobs/batch ignored the key, so a retried batch of one charge job made two jobs,
two effect keys and two committed charges.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest

from reliableq import services
from reliableq.models import BatchKey, Job

from .conftest import problem

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = ("reliableq.submit_job", "reliableq.view_job")
CHARGE = {"kind": "charge", "payload": {"amount": 4200, "currency": "EUR", "description": "order 77"}}
NOOP = {"kind": "demo.noop", "payload": {}}


def post_batch(client, jobs: list[dict], key: str | None):
    return client.request(
        "POST", "/v1/jobs/batch", json={"jobs": jobs}, headers={"Idempotency-Key": key} if key else {}
    )


def test_a_retried_batch_returns_the_same_jobs_and_one_effect_key(client_of):
    client = client_of("shop", *SUBMIT)
    jobs = [CHARGE, {**NOOP, "payload": {"n": 1}}]

    first = post_batch(client, jobs, "order-77-charge")
    again = post_batch(client, jobs, "order-77-charge")
    # The same body with its keys in another order is the same body.
    reordered = post_batch(client, [{"payload": CHARGE["payload"], "kind": "charge"}, jobs[1]], "order-77-charge")

    assert first.status_code == 202, first.text
    assert again.status_code == 200 and reordered.status_code == 200
    ids = [job["id"] for job in first.json()["jobs"]]
    assert [job["id"] for job in again.json()["jobs"]] == ids == [job["id"] for job in reordered.json()["jobs"]]
    assert Job.objects.count() == 2
    assert Job.objects.filter(kind="charge").count() == 1  # one job: one effect key, so one charge


def test_the_same_key_with_another_body_is_409_and_makes_nothing(client_of):
    client = client_of("shop", *SUBMIT)
    post_batch(client, [CHARGE], "order-77-charge")

    other = post_batch(client, [{**CHARGE, "payload": {**CHARGE["payload"], "amount": 1}}], "order-77-charge")
    longer = post_batch(client, [CHARGE, CHARGE], "order-77-charge")

    for answer in (other, longer):
        assert "another body" in problem(answer, 409)["detail"]
    assert Job.objects.count() == 1


def test_a_key_used_for_a_single_job_cannot_be_used_for_a_batch_and_back(client_of):
    client = client_of("shop", *SUBMIT)
    client.submit(NOOP, key="single-key")
    post_batch(client, [NOOP], "batch-key")

    problem(post_batch(client, [NOOP], "single-key"), 409)
    problem(client.submit(NOOP, key="batch-key"), 409)
    assert Job.objects.count() == 2


def test_another_users_batch_key_neither_returns_nor_blocks_their_batch(client_of):
    alice, mallory = client_of("alice", *SUBMIT), client_of("mallory", *SUBMIT)
    hers = post_batch(alice, [CHARGE], "order-77-charge")

    mine = post_batch(mallory, [CHARGE], "order-77-charge")

    assert mine.status_code == 202
    assert mine.json()["jobs"][0]["id"] != hers.json()["jobs"][0]["id"]


def test_concurrent_identical_keyed_batches_make_one_set_of_jobs(client_of):
    client = client_of("shop", *SUBMIT)
    jobs = [CHARGE, NOOP, NOOP]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post_batch(client, jobs, "burst"), range(8)))

    assert sorted(a.status_code for a in answers) == [200] * 7 + [202], [a.text[:200] for a in answers]
    assert len({tuple(j["id"] for j in a.json()["jobs"]) for a in answers}) == 1
    assert Job.objects.count() == 3 and BatchKey.objects.count() == 1


def test_a_batch_key_is_pruned_with_its_jobs():
    class User:
        pk = 1

        def get_username(self) -> str:
            return "u"

    made, _ = services.submit_many([services.NewJob(kind="demo.noop", payload={})], submitted_by=User(), key="k")
    Job.objects.filter(pk=made[0].id).update(status="SUCCEEDED", finished_at="2000-01-01T00:00:00Z")

    assert services.prune(older_than=dt.timedelta(days=1)) == 1
    assert not BatchKey.objects.exists()


def test_a_unique_key_with_an_idempotency_key_is_refused_so_no_key_is_left_unbound(client_of):
    """Before: the answer through the unique_key left the Idempotency-Key unbound, a second body took
    it, and an exact resend of the first then got 409 instead of its 200."""
    client = client_of("shop", *SUBMIT)
    held = client.submit({**NOOP, "unique_key": "nightly"})

    refused = client.submit({**NOOP, "unique_key": "nightly"}, key="k-1")

    assert held.status_code == 202
    assert "cannot be combined with an Idempotency-Key" in problem(refused, 400)["errors"]["unique_key"][0]
    assert Job.objects.count() == 1
    taken = client.submit({**NOOP, "payload": {"n": 2}}, key="k-1")
    assert taken.status_code == 202 and client.submit({**NOOP, "payload": {"n": 2}}, key="k-1").status_code == 200
