"""202 means committed: a submission whose COMMIT fails is never acknowledged and leaves no row."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reliableq.models import Job
from reliableq.queue import db

from .conftest import problem_of

pytestmark = pytest.mark.django_db(transaction=True)  # the COMMIT must really happen


@pytest.fixture
def fail_at_commit() -> Iterator[None]:
    """A deferred constraint trigger: a job whose payload has "fail_at_commit" breaks its COMMIT.

    The INSERT itself succeeds (the row comes back, services.submit says created); only the
    COMMIT raises, which is the window between "stored" and "durable".
    """
    with db.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION reliableq_test_fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.payload ? 'fail_at_commit' THEN
                    RAISE EXCEPTION 'refused at commit for job %', NEW.id;
                END IF;
                RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER reliableq_test_fail_at_commit
                AFTER INSERT ON reliableq_job DEFERRABLE INITIALLY DEFERRED
                FOR EACH ROW EXECUTE FUNCTION reliableq_test_fail_at_commit();
            """
        )
    try:
        yield
    finally:
        with db.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER IF EXISTS reliableq_test_fail_at_commit ON reliableq_job;"
                "DROP FUNCTION IF EXISTS reliableq_test_fail_at_commit();"
            )


def test_submission_whose_commit_fails_gets_503_problem_and_leaves_no_row(api, fail_at_commit):
    response = api.post("/v1/jobs", {"kind": "demo.noop", "payload": {"fail_at_commit": True}}, format="json")

    body = problem_of(response, 503)
    assert "nothing was accepted" in body["detail"]
    assert "Location" not in response
    assert not Job.objects.filter(payload__has_key="fail_at_commit").exists()
    assert Job.objects.count() == 0


def test_other_submissions_still_commit_and_get_202_while_the_trigger_is_armed(api, fail_at_commit):
    response = api.post("/v1/jobs", {"kind": "demo.noop", "payload": {"fine": True}}, format="json")

    assert response.status_code == 202, response.content
    assert Job.objects.filter(pk=response.json()["id"]).exists()


def test_idempotency_key_of_a_failed_commit_is_not_taken(api, fail_at_commit):
    """Nothing was accepted, so the key is still free: another body under it is a new job, not a 409."""
    failed = api.post(
        "/v1/jobs",
        {"kind": "demo.noop", "payload": {"fail_at_commit": 1}},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k-after-failure",
    )
    problem_of(failed, 503)

    retried = api.post(
        "/v1/jobs", {"kind": "demo.noop", "payload": {"n": 1}}, format="json", HTTP_IDEMPOTENCY_KEY="k-after-failure"
    )

    assert retried.status_code == 202, retried.content
    assert list(Job.objects.values_list("dedupe_key", "payload")) == [("k-after-failure", {"n": 1})]


def test_the_trigger_is_gone_after_the_test(api):
    """The fixture cleans up: a marker payload commits again (guards the tests that follow)."""
    with db.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'reliableq_test_fail_at_commit'")
        assert cursor.fetchone()[0] == 0
    response = api.post("/v1/jobs", {"kind": "demo.noop", "payload": {"fail_at_commit": True}}, format="json")
    assert response.status_code == 202
