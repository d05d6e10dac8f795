"""Fixtures for the operator admin tests: staff users with and without the job permissions,
logged-in test clients, and jobs in every state with their attempt history.

Everything runs on the real test database (PostgreSQL); nothing is mocked.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from reliableq.models import Attempt, Job, JobStatus, Outcome
from tests.factories import JobFactory, RunningJobFactory

PASSWORD = "correct horse battery staple"

OPERATOR_PERMS = (
    ("reliableq", "view_job"),
    ("reliableq", "replay_job"),
    ("reliableq", "cancel_job"),
    ("charges", "view_charge"),
)


def make_staff(username: str, *perms: tuple[str, str], password: str | None = None) -> User:
    """A staff user (never a superuser) holding exactly `perms` as (app_label, codename) pairs."""
    user = User.objects.create_user(username, password=password, is_staff=True)
    for app_label, codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    assert not user.is_superuser
    assert user.user_permissions.count() == len(perms)
    return user


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator(db: None) -> User:
    """Staff, not superuser: view/replay/cancel jobs and view charges."""
    return make_staff("operator", *OPERATOR_PERMS)


@pytest.fixture
def viewer(db: None) -> User:
    """Staff with reliableq.view_job only."""
    return make_staff("viewer", ("reliableq", "view_job"))


@pytest.fixture
def operator_client(operator: User) -> Client:
    return client_for(operator)


@pytest.fixture
def viewer_client(viewer: User) -> Client:
    return client_for(viewer)


# -- jobs in any state -------------------------------------------------------------------------


def add_attempts(
    job: Job,
    outcomes: list[str],
    *,
    start: dt.datetime | None = None,
    seconds: float = 1.5,
    errors: list[str] | None = None,
) -> list[Attempt]:
    """Attempt rows 1..n for `job`, one minute apart, each `seconds` long, from `start`.

    The default start, 3 hours ago, keeps them out of the dashboard's "last hour".
    """
    start = start or (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=3))
    attempts = []
    for i, outcome in enumerate(outcomes):
        began = start + dt.timedelta(minutes=i)
        attempts.append(
            Attempt.objects.create(
                job=job,
                number=i + 1,
                worker_id=f"worker-{i + 1}",
                lease_token=uuid.uuid4(),
                started_at=began,
                finished_at=None if outcome == Outcome.RUNNING else began + dt.timedelta(seconds=seconds),
                outcome=outcome,
                error=(
                    errors[i]
                    if errors
                    else ""
                    if outcome in (Outcome.SUCCEEDED, Outcome.RUNNING)
                    else f"attempt {i + 1} failed: boom"
                ),
            )
        )
    return attempts


def dead_job(**kwargs: Any) -> Job:
    """A DEAD job whose three attempts failed, with its history."""
    kwargs.setdefault("kind", "test.always_fails")
    kwargs.setdefault("max_attempts", 3)
    job = JobFactory(
        status=JobStatus.DEAD,
        attempts=kwargs.pop("attempts", 3),
        worker_id="worker-3",
        last_error=kwargs.pop("last_error", "RuntimeError: this handler never succeeds"),
        finished_at=dt.datetime.now(dt.timezone.utc),
        **kwargs,
    )
    add_attempts(job, [Outcome.FAILED_TRANSIENT, Outcome.FAILED_TRANSIENT, Outcome.FAILED_PERMANENT][: job.attempts])
    return job


def running_job(*, lease_seconds: float = 300, **kwargs: Any) -> Job:
    """A RUNNING job with its open attempt, under a lease ending in `lease_seconds` (negative: expired)."""
    return RunningJobFactory(
        lease_expires_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=lease_seconds), **kwargs
    )


def job_in(status: str, **kwargs: Any) -> Job:
    """A job in `status`, consistent with the table's constraints (a lease token iff RUNNING)."""
    if status == JobStatus.DEAD:
        return dead_job(**kwargs)
    if status == JobStatus.RUNNING:
        return running_job(**kwargs)
    if status in (JobStatus.SUCCEEDED, JobStatus.CANCELLED):
        kwargs.setdefault("finished_at", dt.datetime.now(dt.timezone.utc))
    if status == JobStatus.SUCCEEDED:
        kwargs.setdefault("attempts", 1)
        job = JobFactory(status=status, **kwargs)
        add_attempts(job, [Outcome.SUCCEEDED])
        return job
    return JobFactory(status=status, **kwargs)
