"""Workflows in one process: members wait for their upstream, ends release and cancel dependents,
callbacks fire once per run, a replay starts a new run. (Real workers and SIGKILL: tests/fleet.)"""

from __future__ import annotations

from typing import Any

import pytest

import reliableq
from reliableq import queue as jobqueue
from reliableq import registry, services
from reliableq.models import Job, JobStatus, Workflow, WorkflowCascade, WorkflowCount, WorkflowStatus
from reliableq.queue import graph
from reliableq.queue import workflows as statements
from reliableq.testing import drain, run_due
from reliableq.worker import executor
from reliableq.workflows import InvalidWorkflow

pytestmark = pytest.mark.django_db


def statuses(record: Workflow) -> dict[str, str]:
    return {j.member_name: j.status for j in Job.objects.filter(workflow=record, member_name__isnull=False)}


def callbacks(record: Workflow) -> list[tuple[str, str]]:
    return sorted((":".join(j.callback), j.kind) for j in Job.objects.filter(workflow=record, member_name__isnull=True))


def diamond(**report: Any) -> tuple[reliableq.workflows.WorkflowBuilder, list[Any]]:
    wf = reliableq.workflow(name="import 42")
    fetch = wf.add("wf.step", {}, name="fetch")
    loads = [wf.add("wf.step", {"fail": n == 1 and report.pop("fail_load", False)}, name=f"load-{n}", after=[fetch])
             for n in range(3)]  # fmt: skip
    wf.add("wf.step", {}, name="report", after=loads, **report)
    for event in ("success", "failure", "complete"):
        wf.on(event, "wf.callback", {"event": event})
    return wf, loads


def test_members_wait_for_their_upstream_and_see_its_values() -> None:
    wf, _ = diamond()
    record = wf.enqueue()
    assert statuses(record) == {"fetch": "PENDING", "load-0": "WAITING", "load-1": "WAITING",
                                "load-2": "WAITING", "report": "WAITING"}  # fmt: skip

    [first] = run_due()
    assert first.kind == "wf.step"
    assert statuses(record)["fetch"] == "SUCCEEDED"
    assert {statuses(record)[f"load-{n}"] for n in range(3)} == {"PENDING"}
    assert statuses(record)["report"] == "WAITING"

    drain()
    record.refresh_from_db()
    assert record.status == WorkflowStatus.SUCCEEDED and record.finished_at is not None
    report = Job.objects.get(workflow=record, member_name="report")
    assert sorted(report.result["upstream"]) == ["load-0", "load-1", "load-2"]
    assert report.result["upstream"]["load-0"] == {
        "member": "load-0",
        "upstream": {"fetch": {"member": "fetch", "upstream": {}}},
    }
    assert callbacks(record) == [("1:complete", "wf.callback"), ("1:success", "wf.callback")]
    done = Job.objects.get(workflow=record, dedupe_key=f"workflow:{record.pk}:1:success")
    assert done.status == JobStatus.SUCCEEDED
    assert done.result == {"event": "success", "workflow": str(record.pk)}


def test_a_dead_member_cancels_its_dependents_and_fires_failure_once() -> None:
    wf, _ = diamond(fail_load=True)
    record = wf.enqueue()
    drain()
    record.refresh_from_db()
    s = statuses(record)
    assert s["load-1"] == "DEAD" and s["load-0"] == s["load-2"] == "SUCCEEDED"
    assert s["report"] == "CANCELLED"
    report = Job.objects.get(workflow=record, member_name="report")
    assert report.last_error.startswith("upstream member load-1 (") and report.last_error.endswith("ended DEAD")
    assert record.status == WorkflowStatus.FAILED
    assert callbacks(record) == [("1:complete", "wf.callback"), ("1:failure", "wf.callback")]


def test_a_member_that_runs_on_failure_runs_once_every_upstream_finished() -> None:
    wf, _ = diamond(fail_load=True, on_upstream_failure="run")
    record = wf.enqueue()
    drain()
    report = Job.objects.get(workflow=record, member_name="report")
    assert report.status == JobStatus.SUCCEEDED
    assert report.result["upstream"]["load-1"] is None  # it died: no value
    record.refresh_from_db()
    assert record.status == WorkflowStatus.FAILED


def test_a_failure_cancels_transitively_and_names_the_member_it_came_from() -> None:
    wf = reliableq.workflow()
    a = wf.add("wf.step", {"fail": True}, name="a")
    b = wf.add("wf.step", {}, name="b", after=[a])
    c = wf.add("wf.step", {}, name="c", after=[b])
    wf.add("wf.step", {}, name="d", after=[c], on_upstream_failure="run")
    record = wf.enqueue()
    drain()
    s = statuses(record)
    assert s == {"a": "DEAD", "b": "CANCELLED", "c": "CANCELLED", "d": "SUCCEEDED"}
    c_job = Job.objects.get(workflow=record, member_name="c")
    assert c_job.last_error.startswith("upstream member b (") and c_job.last_error.endswith("ended CANCELLED")


def test_replaying_a_dead_member_rewaits_what_it_cancelled_and_starts_a_new_run() -> None:
    wf, _ = diamond(fail_load=True)
    record = wf.enqueue()
    drain()
    dead = Job.objects.get(workflow=record, member_name="load-1")
    Job.objects.filter(pk=dead.pk).update(payload={})  # fixed: it will succeed this time
    services.replay(dead.pk)
    record.refresh_from_db()
    assert record.status == WorkflowStatus.RUNNING and record.run == 2 and record.finished_at is None
    assert statuses(record)["report"] == "WAITING"
    drain()
    record.refresh_from_db()
    assert record.status == WorkflowStatus.SUCCEEDED
    assert statuses(record)["report"] == "SUCCEEDED"
    assert callbacks(record) == [("1:complete", "wf.callback"), ("1:failure", "wf.callback"),
                                 ("2:complete", "wf.callback"), ("2:success", "wf.callback")]  # fmt: skip


def test_a_member_with_another_failed_upstream_stays_cancelled_on_replay() -> None:
    wf = reliableq.workflow()
    a = wf.add("wf.step", {"fail": True}, name="a")
    b = wf.add("wf.step", {"fail": True}, name="b")
    wf.add("wf.step", {}, name="c", after=[a, b])
    record = wf.enqueue()
    drain()
    services.replay(Job.objects.get(workflow=record, member_name="a").pk)
    assert statuses(record)["c"] == "CANCELLED"
    drain()
    record.refresh_from_db()
    assert record.status == WorkflowStatus.FAILED
    assert not WorkflowCount.objects.filter(workflow=record.pk, shard=-1, remaining__gt=0).exists()


def test_cancel_workflow_cancels_waiting_and_pending_and_asks_running_to_stop() -> None:
    wf, _ = diamond(on_upstream_failure="run")
    record = wf.enqueue()
    from reliableq import queue as jobqueue

    [fetch], _ = jobqueue.claim(worker_id="w", queues=("default",), limit=1, lease_seconds=30)
    cancelled = reliableq.cancel_workflow(record.pk)
    assert cancelled.cancel_requested_at is not None and cancelled.status == WorkflowStatus.RUNNING
    s = statuses(record)
    assert s["fetch"] == "RUNNING" and {v for k, v in s.items() if k != "fetch"} == {"CANCELLED"}
    assert Job.objects.get(pk=fetch.id).cancel_requested_at is not None
    assert reliableq.cancel_workflow(record.pk).pk == record.pk  # asked already: no error
    from reliableq.worker import executor

    jobqueue.finish([executor.cancelled(fetch, error="stopped")])
    record.refresh_from_db()
    assert record.status == WorkflowStatus.CANCELLED
    assert callbacks(record) == [("1:complete", "wf.callback"), ("1:failure", "wf.callback")]
    with pytest.raises(services.WrongStatus):
        reliableq.cancel_workflow(record.pk)


def test_a_fan_in_wider_than_one_count_row_is_sharded_and_released_once() -> None:
    wf = reliableq.workflow()
    loads = [wf.add("wf.step", {}, name=f"l{n}") for n in range(100)]
    wf.add("wf.step", {}, name="report", after=loads)
    wf.on("success", "wf.callback", {})
    record = wf.enqueue()
    report = Job.objects.get(workflow=record, member_name="report")
    assert WorkflowCount.objects.filter(target=report.pk).count() == statements.shards_for(100) + 1
    drain()
    record.refresh_from_db()
    assert record.status == WorkflowStatus.SUCCEEDED
    assert callbacks(record) == [("1:success", "wf.callback")]


@pytest.mark.parametrize(
    ("build", "indexes"),
    [
        (lambda wf: (wf.add("wf.step", name="a"), wf.add("wf.step", name="a")), [1]),
        (lambda wf: wf.add("wf.step", after=["nobody"]), [0]),
        (lambda wf: (wf.add("wf.step", name="a", after=["b"]), wf.add("wf.step", name="b", after=["a"])), [0, 1]),
        (lambda wf: wf.add("no.such.kind"), [0]),
        (lambda wf: wf.add("wf.step", {"x": float("nan")}), [0]),
        (lambda wf: wf.add("wf.step", on_upstream_failure="maybe"), [0]),
    ],
)
def test_an_invalid_workflow_names_its_members_and_makes_nothing(build: Any, indexes: list[int]) -> None:
    wf = reliableq.workflow()
    build(wf)
    with pytest.raises(InvalidWorkflow) as raised:
        wf.enqueue()
    assert raised.value.indexes == indexes
    assert not Workflow.objects.exists() and not Job.objects.exists()


def test_an_empty_or_oversized_workflow_is_refused() -> None:
    with pytest.raises(reliableq.InvalidJob):
        reliableq.workflow().enqueue()
    wf = reliableq.workflow()
    for _ in range(10_001):
        wf.add("wf.step")
    with pytest.raises(reliableq.InvalidJob, match="at most 10000"):
        wf.enqueue()


def chain(queue: str = "default", **first: Any) -> tuple[Workflow, Job, Job]:
    wf = reliableq.workflow()
    a = wf.add("wf.step", {}, name="a", queue=queue, **first)
    wf.add("wf.step", {}, name="b", after=[a], queue=queue)
    wf.on("failure", "wf.callback", {})
    record = wf.enqueue()
    return record, Job.objects.get(workflow=record, member_name="a"), Job.objects.get(workflow=record, member_name="b")


def test_a_member_the_rescue_buries_cancels_its_dependents_in_the_rescue() -> None:
    from reliableq import queue as jobqueue

    from .helpers import claim_jobs, expire

    record, a, b = chain(max_attempts=1)
    [claimed] = claim_jobs()
    assert claimed.id == a.pk and claimed.workflow_id == record.pk
    expire(a.pk)
    [rescued] = jobqueue.rescue()
    assert rescued.status == JobStatus.DEAD
    b.refresh_from_db()
    assert b.status == JobStatus.CANCELLED and "ended DEAD" in b.last_error
    assert callbacks(record) == [("1:failure", "wf.callback")]


def test_a_purge_cancels_a_pending_member_and_its_dependents_and_delete_leaves_members() -> None:
    record, _, b = chain(queue="flood")
    assert services.purge("flood", delete=True) == 0  # members are not deleted
    assert services.purge("flood") == 1
    b.refresh_from_db()
    assert b.status == JobStatus.CANCELLED
    record.refresh_from_db()
    assert record.status == WorkflowStatus.FAILED


def test_retention_keeps_every_job_of_an_unfinished_workflow_then_takes_the_workflow_too() -> None:
    import datetime as dt

    from django.db.models import F

    from reliableq.models import WorkflowEdge
    from reliableq.queue.prune import prune_workflows

    wf = reliableq.workflow()
    a = wf.add("wf.step", {}, name="a")
    wf.add("wf.step", {"seconds": 0}, name="b", after=[a])
    wf.add("wf.step", {}, name="c")
    record = wf.enqueue()
    run_due()  # a and c succeed; b is released, PENDING
    old = dt.timedelta(days=30)
    Job.objects.filter(workflow=record).exclude(finished_at=None).update(finished_at=F("finished_at") - old)
    assert services.prune(older_than=dt.timedelta(days=1)) == 0  # its workflow still runs
    drain()
    Job.objects.filter(workflow=record).update(finished_at=F("finished_at") - old)
    assert prune_workflows() == 0  # its jobs are still there
    assert services.prune(older_than=dt.timedelta(days=1)) == 3
    assert prune_workflows() == 1
    assert not Workflow.objects.exists() and not WorkflowEdge.objects.exists() and not WorkflowCount.objects.exists()


def test_an_operator_cancels_one_waiting_member_and_its_dependents_follow() -> None:
    wf = reliableq.workflow()
    x = wf.add("wf.step", {}, name="x")
    y = wf.add("wf.step", {}, name="y", after=[x])
    wf.add("wf.step", {}, name="z", after=[y])
    other = wf.enqueue()
    y_job = Job.objects.get(workflow=other, member_name="y")
    assert services.cancel(y_job.pk).status == JobStatus.CANCELLED
    assert statuses(other) == {"x": "PENDING", "y": "CANCELLED", "z": "CANCELLED"}
    drain()
    other.refresh_from_db()
    assert other.status == WorkflowStatus.FAILED and statuses(other)["x"] == "SUCCEEDED"


def test_a_callback_takes_only_the_options_it_keeps() -> None:
    wf = reliableq.workflow()
    with pytest.raises(TypeError, match="run_at"):
        wf.on("success", "wf.callback", {}, run_at=None)
    with pytest.raises(TypeError, match="dedupe_key"):
        wf.add("wf.step", {}, dedupe_key="k")
    wf.on("success", "wf.callback", {}, queue="callbacks", priority=5, max_attempts=2)
    wf.add("wf.step", {})
    record = wf.enqueue()
    drain(["default"])
    [callback] = Job.objects.filter(workflow=record, member_name__isnull=True)
    assert (callback.queue, callback.priority, callback.max_attempts) == ("callbacks", 5, 2)


def test_a_member_rewaited_by_a_replay_is_cancelled_again_when_that_upstream_dies_again() -> None:
    wf = reliableq.workflow()
    a = wf.add("wf.step", {"fail": True}, name="a")
    b = wf.add("wf.step", {"fail": True}, name="b", queue="b")
    wf.add("wf.step", {}, name="report", after=[a, b])
    record = wf.enqueue()
    drain()
    assert statuses(record) == {"a": "DEAD", "b": "DEAD", "report": "CANCELLED"}
    a_job = Job.objects.get(workflow=record, member_name="a")
    Job.objects.filter(pk=a_job.pk).update(payload={})
    services.replay(a_job.pk)  # b is still DEAD: report stays cancelled
    assert statuses(record)["report"] == "CANCELLED"
    services.replay(Job.objects.get(workflow=record, member_name="b").pk)  # nothing blocks it now
    assert statuses(record)["report"] == "WAITING"
    [died] = run_due(["b"])  # b dies again (its payload still says so), then a succeeds
    assert died.status == JobStatus.DEAD
    assert statuses(record)["report"] == "CANCELLED"
    drain()
    assert statuses(record) == {"a": "SUCCEEDED", "b": "DEAD", "report": "CANCELLED"}


def test_a_member_left_waiting_by_a_racing_replay_is_cancelled_by_the_end_that_zeroed_its_count() -> None:
    """The finish reads its dependents in its own snapshot: a member a concurrent replay re-waited looks
    cancelled to it, so its count reaches zero with a failure and the release leaves it WAITING. The
    finish's statement says so (its recheck), and the second look in the same transaction cancels it.
    Simulated here: the member is put back to WAITING after its upstream's death cancelled it."""
    from reliableq import queue as jobqueue
    from reliableq.models import Outcome
    from reliableq.queue import Finish

    wf = reliableq.workflow(name="race")
    first = wf.add("wf.step", {}, name="a", priority=-1)  # claimed before b
    second = wf.add("wf.step", {}, name="b")
    wf.add("wf.step", {}, name="d", after=[first, second])
    record = wf.enqueue()

    def end(status: str, outcome: str) -> None:
        [job], _ = jobqueue.claim(worker_id="w", queues=("default",), limit=1, lease_seconds=30)
        finish = Finish(job_id=job.id, lease_token=job.lease_token, status=status, outcome=outcome, workflow=True)
        jobqueue.finish([finish])

    end(JobStatus.DEAD, Outcome.FAILED_PERMANENT)  # a
    assert statuses(record)["d"] == JobStatus.CANCELLED
    Job.objects.filter(workflow=record, member_name="d").update(status=JobStatus.WAITING, finished_at=None)
    end(JobStatus.SUCCEEDED, Outcome.SUCCEEDED)  # b zeroes d's count, with a's failure in it
    assert statuses(record) == {"a": JobStatus.DEAD, "b": JobStatus.SUCCEEDED, "d": JobStatus.CANCELLED}


@pytest.mark.django_db(transaction=True)
def test_a_second_failure_does_not_wait_for_a_finish_holding_the_failure_callback() -> None:
    """The failure callback fires at a run's first failure; a later failure finds it stored and
    inserts nothing. Were it to wait for the callback's key, it would wait for whoever is ending
    that callback's job: a finish that may itself wait for a count the later failure holds."""
    import psycopg

    from reliableq.queue import db
    from testproject import dburl

    wf = reliableq.workflow(name="two failures")
    wf.add("wf.step", {"fail": True}, name="a", queue="wf-a", max_attempts=1)
    wf.add("wf.step", {"fail": True}, name="b", queue="wf-b", max_attempts=1)
    wf.on("failure", "wf.callback", {}, queue="wf-callbacks")
    record = wf.enqueue()
    drain(["wf-a"])
    [callback] = Job.objects.filter(workflow=record, member_name__isnull=True)
    with psycopg.connect(dburl.build(db.connection().settings_dict)) as holder:
        # A finish of the callback's job, not yet committed: a new version of its row, under its key.
        holder.execute(
            "UPDATE reliableq_job SET status = 'SUCCEEDED', finished_at = now() WHERE id = %s", (callback.id,)
        )
        with db.cursor() as cursor:  # an end that waited for the key would fail here, not hang
            cursor.execute("SET lock_timeout = '5s'")
        try:
            drain(["wf-b"])
        finally:
            with db.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        holder.rollback()
    assert statuses(record) == {"a": "DEAD", "b": "DEAD"}
    assert callbacks(record) == [("1:failure", "wf.callback")]


@pytest.mark.django_db(transaction=True)
def test_an_operators_cancel_aborted_by_a_deadlock_with_a_finish_is_retried() -> None:
    """An operator cancels a waiting member while a finish that holds the counts its end must take
    goes on to release that member: each waits for the other, PostgreSQL aborts the cancel, which
    runs again once the finish has committed."""
    import threading

    import psycopg

    from reliableq.queue import db
    from testproject import dburl

    wf = reliableq.workflow(name="cancel meets finish")
    up = wf.add("wf.step", {}, name="up")
    wf.add("wf.step", {}, name="down", after=[up])
    record = wf.enqueue()
    down = Job.objects.get(workflow=record, member_name="down")
    outcome: list[Any] = []
    with psycopg.connect(dburl.build(db.connection().settings_dict)) as finish:
        # PostgreSQL aborts the waiter whose deadlock_timeout ends first once the cycle is closed,
        # and looks only once per wait: the cancel looks after 4 s (time enough for the finish to
        # close the cycle on a loaded machine), the finish would look after a minute.
        finish.execute("SET deadlock_timeout = '60s'")
        # The finish of `up`: the workflow's count locked, then `down`'s row, as its release does.
        finish.execute("SELECT 1 FROM reliableq_workflowcount WHERE target = %s FOR UPDATE", (record.pk,))

        def operator() -> None:
            try:
                with db.connection().cursor() as cursor:
                    cursor.execute("SET deadlock_timeout = '4s'")
                outcome.append(services.cancel(down.pk))
            except Exception as exc:  # shown by the assertion below
                outcome.append(exc)
            finally:
                from django.db import connections

                connections.close_all()

        thread = threading.Thread(target=operator)
        thread.start()
        with psycopg.connect(dburl.build(db.connection().settings_dict), autocommit=True) as watch:
            wait_for_lock_wait(watch, exclude=finish.info.backend_pid)
        finish.execute("UPDATE reliableq_job SET updated_at = now() WHERE id = %s", (down.pk,))
        finish.commit()
        thread.join(30)
    [result] = outcome
    assert isinstance(result, Job), result
    assert statuses(record)["down"] == "CANCELLED"


def wait_for_lock_wait(watch: Any, *, exclude: int) -> None:
    from tests.support import wait_until

    wait_until(
        lambda: (
            watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> %s",
                (exclude,),
            ).fetchone()[0]
            == 1
        ),
        timeout=10,
        what="the operator's cancel to wait for the count",
    )


def long_chain(links: int, **head: Any) -> Workflow:
    wf = reliableq.workflow(name=f"chain of {links}")
    previous = wf.add("wf.step", {"fail": True, **head}, name="m0")
    for n in range(1, links):  # a no-op: a member's value nests its upstream's, and a long chain's would not fit
        previous = wf.add("demo.noop", {}, name=f"m{n}", after=[previous])
    wf.on("complete", "wf.callback", {})
    return wf.enqueue()


def end_head(record: Workflow) -> Job:
    """Claim and run the chain's head, and write its end, as a worker's completer would, but no further."""
    [claimed], _ = jobqueue.claim(worker_id="w-test", queues=["default"], limit=1, lease_seconds=30,
                                  limits=registry.limits())  # fmt: skip
    result = executor.run_attempt(claimed)
    jobqueue.finish([result.finish])
    return Job.objects.get(pk=claimed.id)


def test_a_finish_cancels_a_bounded_share_of_a_long_chain_and_hands_the_rest_on() -> None:
    record = long_chain(1000)
    head = end_head(record)
    assert head.status == JobStatus.DEAD
    cancelled = Job.objects.filter(workflow=record, status=JobStatus.CANCELLED)
    assert cancelled.count() == graph.WALK
    assert WorkflowCascade.objects.exists()
    steps = 0
    while statements.cascade()[0]:  # each step its own short transaction, however long the machine takes
        steps += 1
    assert steps > 0 and cancelled.count() == 999 and not WorkflowCascade.objects.exists()
    record.refresh_from_db()
    assert record.status == WorkflowStatus.FAILED
    assert callbacks(record) == [("1:complete", "wf.callback")]
    last = Job.objects.get(workflow=record, member_name="m999")
    assert last.last_error.startswith("upstream member m998 (") and last.last_error.endswith("ended CANCELLED")


def test_an_operators_cancel_of_a_long_chains_first_member_reaches_its_end_before_it_returns() -> None:
    wf = reliableq.workflow()
    previous = wf.add("wf.step", {}, name="m0")
    for n in range(1, 600):
        previous = wf.add("wf.step", {}, name=f"m{n}", after=[previous])
    record = wf.enqueue()
    services.cancel(Job.objects.get(workflow=record, member_name="m0").pk)
    assert Job.objects.filter(workflow=record, status=JobStatus.CANCELLED).count() == 600
    record.refresh_from_db()
    assert record.status == WorkflowStatus.FAILED


def test_a_replay_before_the_rest_of_a_cancel_goes_on_leaves_the_rewaited_members_waiting() -> None:
    # Just past one walk, so that some members are handed on, and short enough to run to the end.
    record = long_chain(graph.WALK + 20)
    head = end_head(record)
    Job.objects.filter(pk=head.pk).update(payload={})  # fixed: it will succeed this time
    services.replay(head.pk)
    assert WorkflowCascade.objects.exists()
    assert statements.drain() == 0, "the members the hand-off names wait again: nothing to cancel"
    assert not Job.objects.filter(workflow=record, status=JobStatus.CANCELLED).exists()
    drain(max_rounds=graph.WALK + 40)
    record.refresh_from_db()
    assert record.status == WorkflowStatus.SUCCEEDED


def test_a_members_upstream_values_are_read_in_the_claims_own_snapshot() -> None:
    """reliableq_upstream is STABLE: its query runs in the snapshot of the claim that calls it (a
    VOLATILE function's queries each take a fresh one, as reliableq_key_room's must)."""
    from reliableq.queue import db

    with db.cursor() as cursor:  # the queue's database, which may be one of its own
        cursor.execute(
            "SELECT proname, provolatile FROM pg_proc WHERE proname IN ('reliableq_upstream', 'reliableq_key_room')"
        )
        assert dict(cursor.fetchall()) == {"reliableq_upstream": "s", "reliableq_key_room": "v"}
