"""Workflows under real worker processes: a member killed at each failure window, and fan-ins
finished by several processes at once, release their dependents and fire each callback once."""

from __future__ import annotations

import signal

import pytest

import reliableq
from reliableq.faults import ATTEMPT_POINTS as POINTS  # the attempt's windows; steps: test_steps.py
from reliableq.models import Attempt, Job, JobStatus, Workflow, WorkflowCount, WorkflowStatus
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEASE = "0.6"


def finished(workflow_ids) -> bool:
    return not Workflow.objects.filter(pk__in=list(workflow_ids), status=WorkflowStatus.RUNNING).exists()


def callbacks(record: Workflow) -> list[str]:
    return sorted(":".join(j.callback) for j in Job.objects.filter(workflow=record, member_name__isnull=True))


def assert_ran_after_upstream(record: Workflow) -> None:
    """No member's first attempt started before each upstream member finished, and (unless it said
    on_upstream_failure="run") succeeded."""
    from reliableq.models import WorkflowEdge

    jobs = {j.pk: j for j in Job.objects.filter(workflow=record, member_name__isnull=False)}
    first_start = {}
    for a in Attempt.objects.filter(job_id__in=list(jobs)).order_by("number"):
        first_start.setdefault(a.job_id, a.started_at)
    for edge in WorkflowEdge.objects.filter(workflow=record.pk).exclude(target=record.pk):
        if edge.target not in first_start:
            continue
        up, down = jobs[edge.upstream], jobs[edge.target]
        assert up.finished_at is not None and up.finished_at <= first_start[edge.target], (
            down.member_name,
            up.member_name,
        )
        if down.on_upstream_failure != "run":
            assert up.status == JobStatus.SUCCEEDED, (down.member_name, "ran after a failed upstream", up.member_name)


def test_a_member_killed_at_each_failure_window_releases_its_dependent_once(spawn_worker):
    records = {}
    for point in POINTS:
        wf = reliableq.workflow(name=point)
        first = wf.add("wf.step", {}, name="first", queue=f"wf-{point}")
        wf.add("wf.step", {}, name="second", after=[first], queue=f"wf-{point}")
        for event in ("success", "complete"):
            wf.on(event, "wf.callback", {}, queue=f"wf-{point}")
        records[point] = wf.enqueue()
    crashers = [
        spawn_worker("--lease-seconds", LEASE, "--queues", f"wf-{point}", "--worker-id", f"crash-{point}",
                     env={"RELIABLEQ_FAULT_INJECTION": "1", "RELIABLEQ_CRASH_AT": point})
        for point in POINTS
    ]  # fmt: skip
    for point, crasher in zip(POINTS, crashers, strict=True):
        assert crasher.wait(timeout=30) == -signal.SIGKILL, f"{point}: {crasher.output()}"
        # Whatever it did before dying, the dependent is still waiting: the release commits with the finish.
        assert Job.objects.get(workflow=records[point], member_name="second").status == JobStatus.WAITING, point
        assert callbacks(records[point]) == [], point
    rescuer = spawn_worker("--lease-seconds", LEASE, "--queues", ",".join(f"wf-{p}" for p in POINTS))
    wait_until(
        lambda: (
            finished(r.pk for r in records.values())
            and not Job.objects.exclude(status__in=[JobStatus.SUCCEEDED]).exists()
        ),
        timeout=60,
        what="every workflow and callback to finish",
    )
    rescuer.stop()
    for point, record in records.items():
        record.refresh_from_db()
        assert record.status == WorkflowStatus.SUCCEEDED, point
        first = Job.objects.get(workflow=record, member_name="first")
        second = Job.objects.get(workflow=record, member_name="second")
        assert (first.attempts, second.attempts) == (2, 1), point  # the killed attempt, then the rescue's
        assert callbacks(record) == ["1:complete", "1:success"], point
        assert_ran_after_upstream(record)


def test_fan_ins_finished_by_several_processes_at_once_release_once(spawn_worker):
    good = reliableq.workflow(name="wide")
    loads = [good.add("wf.step", {}, name=f"load-{n}") for n in range(600)]
    good.add("wf.step", {}, name="report", after=loads)
    for event in ("success", "failure", "complete"):
        good.on(event, "wf.callback", {})
    bad = reliableq.workflow(name="wide, some fail")
    loads = [bad.add("wf.step", {"fail": n % 97 == 5}, name=f"load-{n}") for n in range(600)]
    bad.add("wf.step", {}, name="report", after=loads)
    bad.add("wf.step", {}, name="tally", after=loads, on_upstream_failure="run")
    for event in ("success", "failure", "complete"):
        bad.on(event, "wf.callback", {})
    records = [good.enqueue(), bad.enqueue()]
    workers = [spawn_worker("--concurrency", "8") for _ in range(3)]
    wait_until(lambda: finished(r.pk for r in records), timeout=120, what="both workflows to finish")
    wait_until(
        lambda: not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists(),
        timeout=60,
        what="callbacks",
    )
    for w in workers:
        w.stop()
        assert "deadlock" not in w.output().lower(), w.output()
    good_record, bad_record = records
    good_record.refresh_from_db()
    bad_record.refresh_from_db()
    assert good_record.status == WorkflowStatus.SUCCEEDED
    assert Job.objects.get(workflow=good_record, member_name="report").attempts == 1
    assert callbacks(good_record) == ["1:complete", "1:success"]
    assert bad_record.status == WorkflowStatus.FAILED
    assert Job.objects.get(workflow=bad_record, member_name="report").status == JobStatus.CANCELLED
    tally = Job.objects.get(workflow=bad_record, member_name="tally")
    assert (tally.status, tally.attempts) == (JobStatus.SUCCEEDED, 1)
    assert callbacks(bad_record) == ["1:complete", "1:failure"]
    assert not Job.objects.filter(status=JobStatus.WAITING).exists()
    assert not WorkflowCount.objects.exclude(remaining=0).exists()
    for record in records:
        assert_ran_after_upstream(record)


def test_many_small_fan_ins_with_failures_and_replays_keep_every_workflow_invariant(spawn_worker, db_url):
    """Fan-ins whose members die at random, finished by three processes at once, then replayed
    twice: the chaos profile's workflow invariants, checked on what is left."""
    import psycopg

    from reliableq import services
    from tests.chaos.invariants import Report, check_workflows

    records = []
    for n in range(60):
        wf = reliableq.workflow(name=f"small {n}")
        fetch = wf.add("chaos.wf_member", {"rate": 0.0, "dies": n % 7 == 0}, name="fetch")
        loads = [wf.add("chaos.wf_member", {"rate": 0.3, "dies": (n + i) % 5 == 0}, name=f"load-{i}", after=[fetch])
                 for i in range(4)]  # fmt: skip
        wf.add("chaos.wf_member", {"rate": 0.0}, name="report", after=loads)
        wf.add("chaos.wf_member", {"rate": 0.0}, name="tally", after=loads, on_upstream_failure="run")
        for event in ("success", "failure", "complete"):
            wf.on(event, "wf.callback", {"event": event})
        records.append(wf.enqueue())
    workers = [spawn_worker("--concurrency", "8") for _ in range(3)]
    unfinished = [JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING]
    for _ in range(3):
        wait_until(lambda: not Job.objects.filter(status__in=unfinished).exists(), timeout=120, what="settling")
        dead = list(Job.objects.filter(status=JobStatus.DEAD, member_name__isnull=False).values_list("pk", flat=True))
        for job_id in dead:
            services.replay(job_id)
    wait_until(lambda: not Job.objects.filter(status__in=unfinished).exists(), timeout=120, what="settling")
    for w in workers:
        w.stop()
    report = Report()
    with psycopg.connect(db_url, autocommit=True) as conn:
        check_workflows(conn, report)
    assert report.checked["member_after_upstream"] > 0
    assert not report.violations, "\n".join(report.violations)


def test_a_cancel_handed_on_by_a_worker_that_died_is_taken_up_by_the_leader(spawn_worker):
    from reliableq import registry
    from reliableq.models import WorkflowCascade
    from reliableq.queue import claim, finish, graph
    from reliableq.worker import executor
    from tests.support import wait_until

    wf = reliableq.workflow(name="left behind")
    previous = wf.add("wf.step", {"fail": True}, name="m0", queue="handed")
    for n in range(1, 1000):
        previous = wf.add("demo.noop", {}, name=f"m{n}", after=[previous], queue="handed")
    record = wf.enqueue()
    # The head's end as a worker writes it, by a worker that dies before it goes on with the rest.
    [head], _ = claim(worker_id="gone", queues=["handed"], limit=1, lease_seconds=30, limits=registry.limits())
    finish([executor.run_attempt(head).finish])
    assert Job.objects.filter(workflow=record, status=JobStatus.CANCELLED).count() == graph.WALK
    assert WorkflowCascade.objects.exists()

    spawn_worker("--queues", "elsewhere")  # the leader, serving another queue: it takes it up all the same
    wait_until(lambda: finished([record.pk]), timeout=60, what="the leader to take the cancel up")
    assert Job.objects.filter(workflow=record, status=JobStatus.CANCELLED).count() == 999
    assert not WorkflowCascade.objects.exists()
