"""prunejobs: delete old finished jobs and their attempts in batches; keep everything else."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models.functions import Now

from reliableq import services
from reliableq.models import Attempt, Job, JobStatus, Outcome
from tests.factories import JobFactory, RunningJobFactory


def finished(status: str, *, days_ago: float, with_attempts: int = 1) -> Job:
    job = JobFactory(status=status, attempts=with_attempts)
    for n in range(1, with_attempts + 1):
        Attempt.objects.create(job=job, number=n, worker_id="w", lease_token=job.pk, outcome=Outcome.FAILED_TRANSIENT)
    Job.objects.filter(pk=job.pk).update(finished_at=Now() - dt.timedelta(days=days_ago))
    return job


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prunejobs", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_prunejobs_deletes_old_finished_jobs_and_their_attempts_in_batches() -> None:
    old = [
        finished(JobStatus.SUCCEEDED, days_ago=8),
        finished(JobStatus.SUCCEEDED, days_ago=30, with_attempts=2),
        finished(JobStatus.DEAD, days_ago=9, with_attempts=3),
        finished(JobStatus.CANCELLED, days_ago=7.5, with_attempts=0),
        finished(JobStatus.DEAD, days_ago=400),
    ]
    recent = [finished(JobStatus.SUCCEEDED, days_ago=6.9), finished(JobStatus.DEAD, days_ago=0)]
    pending = JobFactory()
    Job.objects.filter(pk=pending.pk).update(
        created_at=Now() - dt.timedelta(days=60), run_at=Now() - dt.timedelta(days=60)
    )
    # Even with an old finished_at (left by hand, say), only finished statuses are pruned.
    odd_pending = JobFactory()
    Job.objects.filter(pk=odd_pending.pk).update(finished_at=Now() - dt.timedelta(days=60))
    running = RunningJobFactory()
    Job.objects.filter(pk=running.pk).update(created_at=Now() - dt.timedelta(days=60))

    output = prune("--older-than", "7d", "--batch-size", "2")

    assert output.splitlines() == [
        "deleted 2 finished job(s) so far",
        "deleted 4 finished job(s) so far",
        "deleted 5 finished job(s) so far",
        "Deleted 5 finished job(s) older than 7d.",
    ]
    kept = set(Job.objects.values_list("pk", flat=True))
    assert kept == {j.pk for j in recent} | {pending.pk, odd_pending.pk, running.pk}
    assert not Attempt.objects.filter(job_id__in=[j.pk for j in old]).exists()
    assert Attempt.objects.filter(job_id__in=[j.pk for j in recent]).count() == 2
    assert Attempt.objects.filter(job=running).count() == 1


@pytest.mark.django_db
def test_prunejobs_with_nothing_old_deletes_nothing() -> None:
    finished(JobStatus.SUCCEEDED, days_ago=1)
    assert prune("--older-than", "7d") == "Deleted 0 finished job(s) older than 7d.\n"
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_prunejobs_when_the_last_batch_is_full() -> None:
    for _ in range(4):
        finished(JobStatus.SUCCEEDED, days_ago=2)
    output = prune("--older-than", "36h", "--batch-size", "2")
    assert output.splitlines() == [
        "deleted 2 finished job(s) so far",
        "deleted 4 finished job(s) so far",
        "Deleted 4 finished job(s) older than 36h.",
    ]
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("age", "seconds"), [("90s", 90), ("15m", 900), ("12h", 43200), ("1.5d", 129600), ("2w", 1209600)]
)
def test_prunejobs_understands_every_unit(age: str, seconds: float) -> None:
    just_older = finished(JobStatus.SUCCEEDED, days_ago=(seconds + 60) / 86400)
    just_younger = finished(JobStatus.SUCCEEDED, days_ago=(seconds - 60) / 86400)
    prune("--older-than", age)
    assert set(Job.objects.values_list("pk", flat=True)) == {just_younger.pk}
    assert just_older.pk not in set(Job.objects.values_list("pk", flat=True))


@pytest.mark.django_db
def test_prune_service_reports_every_batch() -> None:
    for _ in range(3):
        finished(JobStatus.DEAD, days_ago=10)
    batches: list[int] = []
    assert services.prune(older_than=dt.timedelta(days=7), batch_size=2, progress=batches.append) == 3
    assert batches == [2, 1]


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["7", "7x", "d", "-1d", "seven days", "", "1.5.2d", "7 d d", "1e3d"])
def test_prunejobs_refuses_bad_ages_with_a_clear_message(value: str) -> None:
    finished(JobStatus.SUCCEEDED, days_ago=30)
    with pytest.raises(CommandError, match=r"--older-than takes a number and a unit \(s, m, h, d, w\), like 7d"):
        prune(f"--older-than={value}")
    assert Job.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["99999999999999d", "9999999w", "1000000000000000000000s"])
def test_prunejobs_refuses_ages_too_large_to_mean_anything(value: str) -> None:
    finished(JobStatus.SUCCEEDED, days_ago=30)
    with pytest.raises(CommandError, match=r"--older-than is at most 36500d \(100 years\)"):
        prune("--older-than", value)
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_prunejobs_accepts_the_largest_age() -> None:
    finished(JobStatus.SUCCEEDED, days_ago=30)
    assert prune("--older-than", "36500d") == "Deleted 0 finished job(s) older than 36500d.\n"
    assert Job.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("size", ["0", "-5"])
def test_prunejobs_refuses_a_batch_size_below_one(size: str) -> None:
    with pytest.raises(CommandError, match="--batch-size must be at least 1"):
        prune("--older-than", "7d", "--batch-size", size)


def test_prunejobs_requires_older_than() -> None:
    with pytest.raises(CommandError, match="--older-than"):
        call_command("prunejobs")


@pytest.mark.django_db
def test_prunejobs_dry_run_counts_and_deletes_nothing_and_status_keeps_the_others() -> None:
    dead = finished(JobStatus.DEAD, days_ago=8)
    done = finished(JobStatus.SUCCEEDED, days_ago=8)

    dry = prune("--older-than", "0s", "--dry-run")
    assert dry.strip() == "Would delete 2 SUCCEEDED,DEAD,CANCELLED job(s) older than 0s; deleted nothing."
    assert Job.objects.count() == 2

    only = prune("--older-than", "1d", "--status", "succeeded")
    assert only.splitlines()[-1] == "Deleted 1 SUCCEEDED job(s) older than 1d."
    assert list(Job.objects.values_list("pk", flat=True)) == [dead.pk]
    assert not Job.objects.filter(pk=done.pk).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("statuses", ["PENDING", "RUNNING,DEAD", ","])
def test_prunejobs_refuses_unfinished_statuses_and_names_the_purge(statuses: str) -> None:
    with pytest.raises(CommandError, match="reliableq_queue purge"):
        prune("--older-than", "1d", "--status", statuses)


@pytest.mark.django_db
def test_a_kept_result_is_deleted_with_its_job() -> None:
    """Retention (and prunejobs) delete a job's result with the job, never leaving it behind."""
    from reliableq.models import ReturnValue

    old = finished(JobStatus.SUCCEEDED, days_ago=8)
    ReturnValue.objects.create(job=old, value={"rows": 42})
    assert Job.objects.get(pk=old.pk).result == {"rows": 42}

    services.prune(older_than=dt.timedelta(days=7))

    assert not Job.objects.filter(pk=old.pk).exists()
    assert not ReturnValue.objects.filter(job_id=old.pk).exists()
