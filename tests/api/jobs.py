"""Jobs in any status, made the way the system makes them: enqueue, then real claims and finishes."""

from __future__ import annotations

import uuid
from typing import Any

import reliableq
from reliableq import queue as jobqueue
from reliableq import services
from reliableq.models import Job, JobStatus, Outcome
from reliableq.queue import Finish

WORKER = "w-api-test"


def fresh_queue() -> str:
    """A queue of its own, so that a claim takes exactly the job put there."""
    return f"t-{uuid.uuid4().hex[:12]}"


def claim_one(queue: str, *, worker_id: str = WORKER) -> jobqueue.ClaimedJob:
    claimed, _ = jobqueue.claim(worker_id=worker_id, queues=[queue], limit=1, lease_seconds=30)
    assert len(claimed) == 1, f"expected one due job in {queue}, claimed {claimed}"
    return claimed[0]


def finish(claimed: jobqueue.ClaimedJob, status: str, outcome: str, error: str = "") -> None:
    result = jobqueue.finish(
        [Finish(job_id=claimed.id, lease_token=claimed.lease_token, status=status, outcome=outcome, error=error)]
    )
    assert result.finalized == [claimed.id], result


def job_in(status: str, *, kind: str = "demo.noop", payload: dict[str, Any] | None = None, **options: Any) -> Job:
    """A job in `status`; RUNNING, SUCCEEDED and DEAD ones went through jobqueue.claim (and finish)."""
    queue = options.pop("queue", None) or fresh_queue()
    if status == JobStatus.WAITING:  # a workflow's member whose upstream has not run
        wf = reliableq.workflow()
        first = wf.add("demo.noop", {}, name="first", queue=queue)
        wf.add(kind, payload if payload is not None else {"made": status}, name="waiting", after=[first], queue=queue)
        return Job.objects.get(workflow=wf.enqueue(), member_name="waiting")
    job = reliableq.enqueue(kind, payload if payload is not None else {"made": status}, queue=queue, **options)
    if status == JobStatus.CANCELLED:
        services.cancel(job.id)
    elif status != JobStatus.PENDING:
        claimed = claim_one(queue)
        if status == JobStatus.SUCCEEDED:
            finish(claimed, JobStatus.SUCCEEDED, Outcome.SUCCEEDED)
        elif status == JobStatus.DEAD:
            finish(claimed, JobStatus.DEAD, Outcome.FAILED_PERMANENT, "permanent: the input can never be valid")
        else:
            assert status == JobStatus.RUNNING, status
    job.refresh_from_db()
    assert job.status == status
    return job
