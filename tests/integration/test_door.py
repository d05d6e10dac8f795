"""One door for every change of a job's status (reliableq.queue.door).

A trigger of the test's own records, for each job row whose status an UPDATE changes, the text of
the statement that changed it: every one must be a statement the door made (it begins with the
door's mark), whichever way in the change came. The workload takes every way a job's status changes:
a claim, finishes (a success, a retry, a burial, a member's end that releases and one that cancels),
a rescue, the release of an unacknowledged claim, a cancel, a purge, a replay, a workflow's cancel,
the rest of a cancel handed on, and the cancel of a member left stuck.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

import reliableq
from reliableq import queue as jobqueue
from reliableq import services
from reliableq.models import Job, JobStatus, Outcome, Workflow, WorkflowCount
from reliableq.queue import Finish, db, door, finishes, graph
from reliableq.queue import workflows as statements

from .helpers import claim_jobs, expire

pytestmark = pytest.mark.django_db


@pytest.fixture
def changes() -> Iterator[list[tuple[str, str, str]]]:
    """(statement, old status, new status) of every status change, in order, filled in as they happen."""
    with db.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE door_seen (n serial, query text, old text, new text)")
        cursor.execute(
            """CREATE FUNCTION pg_temp.door_probe() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN
                   INSERT INTO pg_temp.door_seen (query, old, new) VALUES (current_query(), OLD.status, NEW.status);
                   RETURN NULL;
               END $$"""
        )
        cursor.execute(
            "CREATE TRIGGER door_probe AFTER UPDATE ON reliableq_job FOR EACH ROW"
            " WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION pg_temp.door_probe()"
        )
    seen: list[tuple[str, str, str]] = []
    yield seen
    with db.cursor() as cursor:
        cursor.execute("DROP TRIGGER door_probe ON reliableq_job")


def read(seen: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    with db.cursor() as cursor:
        cursor.execute("SELECT query, old, new FROM pg_temp.door_seen ORDER BY n")
        seen[:] = cursor.fetchall()
    return seen


def door_name(query: str) -> str | None:
    found = re.match(r"\s*/\* reliableq:(\w+) \*/", query)
    return found.group(1) if found else None


def enqueue(kind: str = "demo.noop", **options: object) -> uuid.UUID:
    return reliableq.enqueue(kind, {}, **options).id  # type: ignore[arg-type]


def end(job_id: uuid.UUID, token: uuid.UUID, status: str, outcome: str, **more: object) -> None:
    jobqueue.finish([Finish(job_id=job_id, lease_token=token, status=status, outcome=outcome, **more)])  # type: ignore[arg-type]


def test_every_change_of_a_jobs_status_is_made_by_the_door(changes: list[tuple[str, str, str]]) -> None:
    finished, retried, buried = enqueue(), enqueue(max_attempts=3), enqueue(max_attempts=1)
    taken = {job.id: job for job in claim_jobs(limit=10)}
    jobqueue.finish([
        Finish(job_id=finished, lease_token=taken[finished].lease_token, status=JobStatus.SUCCEEDED,
               outcome=Outcome.SUCCEEDED),
        Finish(job_id=retried, lease_token=taken[retried].lease_token, status=JobStatus.PENDING,
               outcome=Outcome.FAILED_TRANSIENT, error="try again", delay=60.0),
        Finish(job_id=buried, lease_token=taken[buried].lease_token, status=JobStatus.DEAD,
               outcome=Outcome.FAILED_PERMANENT, error="never"),
    ])  # fmt: skip

    enqueue(max_attempts=1)
    (job,) = claim_jobs()
    expire(job.id)
    jobqueue.rescue()

    enqueue(max_attempts=1)
    claim_jobs(worker_id="w-unheard")
    jobqueue.release_unacknowledged(worker_id="w-unheard", known=[])

    services.cancel(enqueue())
    enqueue(queue="flood")
    services.purge("flood")
    services.replay(buried)

    # A workflow: a member's success releases the next, a death cancels a long chain, handed on.
    wf = reliableq.workflow(name="door")
    first = wf.add("demo.noop", {}, name="first", queue="wf-door")
    head = wf.add("wf.step", {"fail": True}, name="head", after=[first], queue="wf-door")
    previous = head
    for n in range(graph.WALK + 50):
        previous = wf.add("demo.noop", {}, name=f"m{n}", after=[previous], queue="wf-door")
    record = wf.enqueue()
    for _ in range(2):
        (member,) = claim_jobs(queues=["wf-door"])
        failing = member.member_name == "head"
        end(member.id, member.lease_token, JobStatus.DEAD if failing else JobStatus.SUCCEEDED,
            Outcome.FAILED_PERMANENT if failing else Outcome.SUCCEEDED, workflow=True)  # fmt: skip
    assert statements.drain() > 0
    other = reliableq.workflow(name="door, cancelled")
    other.add("demo.noop", {}, name="a", queue="wf-door")
    reliableq.cancel_workflow(other.enqueue().id)

    seen = read(changes)
    assert {door_name(query) for query, _, _ in seen} >= {
        "claim", "finish_jobs", "finish", "rescue", "release_unacknowledged", "cancel", "purge", "replay",
        "cascade", "cancel_workflow",
    }  # fmt: skip
    bypassed = [(query[:120], old, new) for query, old, new in seen if door_name(query) is None]
    assert not bypassed, f"status changed by a statement the door did not make: {bypassed}"
    assert Job.objects.filter(workflow=record, status=JobStatus.CANCELLED).count() == graph.WALK + 50
    assert not WorkflowCount.objects.filter(workflow=record.pk, shard=-1, remaining__gt=0).exists()


def test_a_status_changed_behind_the_doors_back_is_seen(changes: list[tuple[str, str, str]]) -> None:
    job = enqueue()
    Job.objects.filter(pk=job).update(status=JobStatus.CANCELLED)
    [(query, old, new)] = read(changes)
    assert door_name(query) is None and (old, new) == ("PENDING", "CANCELLED")


def stuck_member() -> tuple[uuid.UUID, uuid.UUID]:
    """A member left WAITING with every upstream ended and one failed (as a replay racing an end
    leaves one): (its upstream that is still to end, the member)."""
    wf = reliableq.workflow(name="stuck")
    a = wf.add("demo.noop", {}, name="a")
    b = wf.add("demo.noop", {}, name="b")
    wf.add("demo.noop", {}, name="c", after=[a, b])
    record = wf.enqueue()
    a_id, b_id = (Job.objects.get(workflow=record, member_name=n).pk for n in "ab")
    c_id = Job.objects.get(workflow=record, member_name="c").pk
    # b has failed and been counted; c was left waiting: only a's end is still to count.
    Job.objects.filter(pk=b_id).update(status=JobStatus.DEAD)
    WorkflowCount.objects.filter(target=c_id, shard=-1).update(remaining=1, failed=1)
    return a_id, c_id


@pytest.mark.parametrize("how", ["purge", "cancel_workflow"])
def test_a_purge_and_a_workflows_cancel_take_a_stuck_member_down_as_a_finish_would(how: str) -> None:
    a_id, c_id = stuck_member()
    if how == "purge":
        assert services.purge("default") >= 1
    else:
        reliableq.cancel_workflow(Job.objects.get(pk=a_id).workflow_id)
    assert Job.objects.get(pk=c_id).status == JobStatus.CANCELLED


def test_every_door_statement_is_marked_and_the_door_refuses_an_odd_name() -> None:
    with pytest.raises(ValueError, match="a word"):
        door.statement("two words", moved="SELECT 1", change=door.Change.STARTED, tail="SELECT 1")


def compiles() -> bool:
    with db.cursor() as cursor:
        cursor.execute("SELECT pg_jit_available() AND current_setting('jit')::bool")
        return bool(cursor.fetchone()[0])


@pytest.fixture
def wide_fan_outs_analyzed() -> None:
    """The edges' statistics of a few wide fan-outs (five members of 20,000 dependents each): the
    planner guesses every step of a workflow's walk at some 30 edges, ten steps deep."""
    with db.cursor() as cursor:
        cursor.execute(
            "INSERT INTO reliableq_workflowedge (upstream, target, shard, workflow)"
            " SELECT u, gen_random_uuid(), -1, u FROM (SELECT gen_random_uuid() AS u FROM generate_series(1, 5)) s,"
            " generate_series(1, 20000)"
        )
        cursor.execute("ANALYZE reliableq_workflowedge")  # in the test's transaction, rolled back with it


def two_then_one(queue: str, *, callback: str) -> Workflow:
    """A workflow on `queue`: members a and b, c after both, and a callback on `callback`."""
    wf = reliableq.workflow(name=f"door, {queue}")
    a = wf.add("demo.noop", {}, name="a", queue=queue)
    b = wf.add("demo.noop", {}, name="b", queue=queue)
    wf.add("demo.noop", {}, name="c", after=[a, b], queue=queue)
    wf.on(callback, "demo.noop", {}, queue=queue)
    return wf.enqueue()


def test_members_successes_are_finished_without_the_walk_a_failure_needs(changes: list[tuple[str, str, str]]) -> None:
    """A batch's successes and its failures are finished apart, the successes by the statement that
    leaves out the walk of what a failure dooms; the failure still cancels and fires what it must."""
    record = two_then_one("wf-apart", callback="failure")
    taken = {job.member_name: job for job in claim_jobs(queues=["wf-apart"], limit=2)}
    jobqueue.finish([
        Finish(job_id=taken["a"].id, lease_token=taken["a"].lease_token, status=JobStatus.SUCCEEDED,
               outcome=Outcome.SUCCEEDED, workflow=True),
        Finish(job_id=taken["b"].id, lease_token=taken["b"].lease_token, status=JobStatus.DEAD,
               outcome=Outcome.FAILED_PERMANENT, workflow=True),
    ])  # fmt: skip
    by_job = {new: query for query, _, new in read(changes)}
    assert "wf_walk" not in by_job["SUCCEEDED"] and door_name(by_job["SUCCEEDED"]) == "finish"
    assert "wf_walk" in by_job["DEAD"]
    assert Job.objects.get(workflow=record, member_name="c").status == JobStatus.CANCELLED
    record.refresh_from_db()
    assert record.status == "FAILED"
    assert Job.objects.filter(workflow=record, member_name__isnull=True, dedupe_key__endswith=":failure").count() == 1


@pytest.mark.usefixtures("wide_fan_outs_analyzed")
def test_a_door_statement_that_walks_the_graph_is_planned_without_jit() -> None:
    """Where the server compiles with JIT, the walk's estimate passes every JIT threshold, and each
    member's finish compiled for some 250 ms: the door plans its statements without it."""
    if not compiles():
        pytest.skip("this PostgreSQL has no JIT (the embedded one is built without LLVM)")
    with db.cursor() as cursor:  # the hazard is real: the finish, planned as any statement is, compiles
        cursor.execute(f"EXPLAIN {finishes._finish_sql(True)}", ["[]"])
        assert any("JIT:" in line for (line,) in cursor.fetchall())
    raw = db.connection().connection
    if not hasattr(raw, "add_notice_handler"):
        pytest.skip("psycopg 3 reports the plans as notices")
    plans: list[str] = []
    raw.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    with db.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        cursor.execute("SET auto_explain.log_min_duration = 0")
        cursor.execute("SET auto_explain.log_level = 'notice'")
    try:
        wf = reliableq.workflow(name="jit")
        first = wf.add("demo.noop", {}, name="first", queue="wf-jit")
        second = wf.add("demo.noop", {}, name="second", after=[first], queue="wf-jit")
        wf.add("demo.noop", {}, name="third", after=[second], queue="wf-jit")
        record = wf.enqueue()
        (member,) = claim_jobs(queues=["wf-jit"])
        end(member.id, member.lease_token, JobStatus.SUCCEEDED, Outcome.SUCCEEDED, workflow=True)
        (member,) = claim_jobs(queues=["wf-jit"])
        end(member.id, member.lease_token, JobStatus.DEAD, Outcome.FAILED_PERMANENT, workflow=True)
        services.replay(member.id)
        reliableq.cancel_workflow(record.id)
    finally:
        with db.cursor() as cursor:
            cursor.execute("SET auto_explain.log_min_duration = -1")
    walked = [plan for plan in plans if "wf_" in plan]  # auto_explain's: "duration... Query Text: <sql>..."
    names = {door_name(plan.split("Query Text: ", 1)[-1]) for plan in walked}
    assert names >= {"rescue", "finish", "replay", "cancel_workflow"}, [plan[:200] for plan in plans]
    assert not [plan for plan in walked if "JIT:" in plan]


def test_a_successes_finish_leaves_what_a_zero_decides_to_a_statement_sent_only_then(
    changes: list[tuple[str, str, str]],
) -> None:
    """A fan-in's member that succeeds takes one off a count: its finish counts and nothing more. The
    finish whose count reaches zero sends what the zero decides (the release, the workflow's end, its
    callbacks) in a statement after it, in its transaction."""
    record = two_then_one("wf-zeroed", callback="success")
    sent: list[str] = []

    def count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    taken = {job.member_name: job for job in claim_jobs(queues=["wf-zeroed"], limit=2)}
    with db.connection().execute_wrapper(count):
        end(taken["a"].id, taken["a"].lease_token, JobStatus.SUCCEEDED, Outcome.SUCCEEDED, workflow=True)
    (finish,) = [sql for sql in sent if door_name(sql)]
    assert door_name(finish) == "finish" and "wf_released" not in finish
    assert Job.objects.get(workflow=record, member_name="c").status == JobStatus.WAITING

    sent.clear()
    with db.connection().execute_wrapper(count):
        end(taken["b"].id, taken["b"].lease_token, JobStatus.SUCCEEDED, Outcome.SUCCEEDED, workflow=True)
    assert [door_name(sql) for sql in sent if door_name(sql)] == ["finish", "zeroed"]
    released = [query for query, old, new in read(changes) if (old, new) == ("WAITING", "PENDING")]
    assert [door_name(query) for query in released] == ["zeroed"]

    (c,) = claim_jobs(queues=["wf-zeroed"])
    end(c.id, c.lease_token, JobStatus.SUCCEEDED, Outcome.SUCCEEDED, workflow=True)
    record.refresh_from_db()
    assert record.status == "SUCCEEDED"
    assert Job.objects.filter(workflow=record, dedupe_key__endswith=":success").count() == 1
