"""The writers that the API, the admin and the commands share: enqueue, replay, cancel, prune."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from . import audit, registry, rules, signals, tracing
from .conf import reliableq_settings
from .errors import InvalidJob, KeyConflict, TooManyUnfinished, WrongStatus
from .ids import job_id as new_job_id
from .models import BatchKey, Job, JobStatus, QueueState
from .options import PER_JOB, JobOptions
from .queue import db, operations
from .queue import enqueue as statements
from .queue import workflows as graph
from .queue.enqueue import CHANNEL
from .queue.fairness import Turn, turn_for
from .queue.prune import PURGED, RETENTION_BATCH, RETENTION_BUDGET_SECONDS, Retained, prune, purge, retain

__all__ = [
    "CHANNEL",
    "PURGED",
    "RETENTION_BATCH",
    "RETENTION_BUDGET_SECONDS",
    "InvalidJob",
    "JobOptions",
    "NewJob",
    "Retained",
    "WrongStatus",
    "cancel",
    "enqueue",
    "enqueue_many",
    "enqueue_on_commit",
    "pause",
    "prune",
    "purge",
    "replay",
    "resume",
    "retain",
    "submit",
    "submit_many",
]

# fair_seq is decided by the INSERT (a fair job's turn): left out, it is read from the row if asked for.
_ATTNAMES = [f.attname for f in Job._meta.concrete_fields if f.attname != "fair_seq"]
_ALONE = {"workflow_id": None, "member_name": None, "on_upstream_failure": ""}  # a job of no workflow


def default_max_attempts(kind: str) -> int:
    return _budget(registry.get(kind), None)


def _budget(handler: registry.Handler, max_attempts: int | None) -> int:
    """The attempts a new job gets: the caller's, else its handler's, else MAX_ATTEMPTS."""
    return max_attempts if max_attempts is not None else handler.max_attempts or reliableq_settings.MAX_ATTEMPTS


def enqueue(kind: str, payload: dict[str, Any] | None = None, **options: Any) -> Job:
    """Store a job in the caller's transaction on the queue's database; with `dedupe_key` (or
    `unique_key`, while that job is PENDING or RUNNING), return the job already stored for it.
    `options` are JobOptions' fields.

    Only a transaction open on RELIABLEQ["DATABASE"] is joined: with the queue on a database of its
    own, the job commits at once (autocommit) whatever the caller does on another database; see
    enqueue_on_commit for that case.
    """
    job, _ = submit(kind, payload, JobOptions.of(options))
    return job


def _announce(made: Sequence[tuple[uuid.UUID, str, str]]) -> None:
    """Send job_enqueued for each (id, kind, queue) once the caller's transaction commits (at once in autocommit)."""
    if not made or not signals.job_enqueued.has_listeners():
        return

    def send() -> None:
        for job_id, kind, queue in made:
            signals.send(signals.job_enqueued, job_id=job_id, kind=kind, queue=queue)

    transaction.on_commit(send, using=db.alias())


def pending_bound(submitted_by: Any) -> int | None:
    """How many unfinished jobs this submitter may hold: MAX_PENDING_PER_SUBMITTER for a user, None for code."""
    if submitted_by is None:
        return None
    bound = reliableq_settings.MAX_PENDING_PER_SUBMITTER
    return None if bound is None else int(bound)


def submit(
    kind: str,
    payload: dict[str, Any] | None = None,
    options: JobOptions | None = None,
    *,
    submitted_by: Any = None,
    encoded: str | None = None,
) -> tuple[Job, bool]:
    """Like enqueue, and say whether this call created the job (False: a key found one).

    `encoded`: the payload as the JSON to store, when reliableq.api.submission has applied the
    rules to the job already (as submit_many's NewJob.encoded): they are not applied twice.

    With `submitted_by` (a user), the job records its submitter and `dedupe_key` and
    `unique_key` are that user's own: they never find, block or reveal a job of another user or
    of the code (cron slots, Python callers). The unique constraints decide, in one INSERT ...
    ON CONFLICT DO NOTHING: two concurrent callers with one key make one row, and neither reads
    before it writes. `unique_key` holds only while its job is PENDING or RUNNING: if that job
    finishes between the conflict and the read, the insert is tried again. A submitter's job of a
    fair kind takes the submitter as its fair_key (submitter_fair_key).
    """
    handler = registry.get(kind)  # once: UnknownKind if no app registered it
    o = submitter_fair_key(kind, options or JobOptions(), submitted_by)
    queue, priority, dedupe_key, unique_key = o.queue, o.priority, o.dedupe_key, o.unique_key
    budget, encoded = _checked(kind, payload, o, encoded=encoded, handler=handler)
    turn = turn_for(o.fair_key) if handler.fair else None
    scope = dedupe_scope(submitted_by)
    submitter = "" if submitted_by is None else submitted_by.get_username()
    bound = pending_bound(submitted_by)

    if o.debounce is not None and bound is not None:
        raise InvalidJob("debounce is for code, not for a user's submission.", field="debounce")
    with tracing.publishing(kind, queue) as trace_context:
        context = None if trace_context is None else json.dumps(trace_context)
        columns = [kind, queue, priority, encoded, budget, o.run_at, dedupe_key, scope, submitter,
                   o.concurrency_key, unique_key, context]  # fmt: skip
        if o.debounce is not None:
            job, made = _debounce_one(o.debounce, o.debounce_max, kind, scope, unique_key, turn, columns)
        else:
            found, row, job_id = _insert_one(kind, scope, bound, dedupe_key, unique_key, turn, columns)
    if o.debounce is not None:
        if made:
            _announce([(job.id, kind, queue)])
        return job, made
    if found is not None:
        return found, False
    _announce([(job_id, kind, queue)])
    # Only what the database decided comes back (its times); the rest is what was just inserted,
    # the payload decoded from the JSON that was stored, as a read of the row would give it.
    stored_run_at, created_at, updated_at, _ = row
    values = {
        "id": job_id,
        "kind": kind,
        "queue": queue,
        "priority": priority,
        "payload": json.loads(encoded),
        "status": str(JobStatus.PENDING),
        "attempts": 0,
        "max_attempts": budget,
        "run_at": stored_run_at,
        "lease_token": None,
        "lease_expires_at": None,
        "worker_id": "",
        "last_error": "",
        "dedupe_key": dedupe_key,
        "dedupe_scope": scope,
        "submitted_by": submitter,
        "concurrency_key": o.concurrency_key,
        "fair_key": o.fair_key,
        "unique_key": unique_key,
        "snoozes": 0,
        "cancel_requested_at": None,
        "trace_context": trace_context,
        "progress": None,
        "waiting_for": None,
        "created_at": created_at,
        "updated_at": updated_at,
        "finished_at": None,
        **_ALONE,
    }
    return Job.from_db(db.alias(), _ATTNAMES, [values[name] for name in _ATTNAMES]), True


def _insert_one(
    kind: str,
    scope: str,
    bound: int | None,
    dedupe_key: str | None,
    unique_key: str | None,
    turn: Turn | None,
    columns: list[Any],
) -> tuple[Job | None, Any, uuid.UUID]:
    """INSERT one job (its id, then `columns`); (the job a key already holds, None, id) or (None, row, id)."""
    for _ in range(3):
        job_id = new_job_id()
        row, held = statements.insert_one([job_id, *columns], scope=scope, bound=bound, turn=turn)
        if row is not None:
            return None, row, job_id
        # Another transaction holds a key: ON CONFLICT waited for it to commit, so it is visible. A
        # resent submission finds its job even when the submitter is at its bound.
        found = _holder(kind, scope, dedupe_key, unique_key)
        if found is not None:
            return found, None, job_id
        if held is not None and bound is not None and held >= bound:
            raise TooManyUnfinished(held, bound)
    raise InvalidJob("The unique_key's job kept changing; try again.", field="unique_key")


def _debounce_one(
    seconds: float,
    max_seconds: float | None,
    kind: str,
    scope: str,
    unique_key: str | None,
    turn: Turn | None,
    columns: list[Any],
) -> tuple[Job, bool]:
    """Store a debounced job (its id, then `columns`): (the job as stored, whether it was made now).
    The key's PENDING job comes back debounced, its RUNNING one untouched."""
    for _ in range(3):
        stored = statements.debounce_one([new_job_id(), *columns], seconds=seconds, max_seconds=max_seconds, turn=turn)
        if stored is not None:
            inserted, job = stored
            return job, inserted
        found = _holder(kind, scope, None, unique_key)
        if found is not None:
            return found, False
    raise InvalidJob("The unique_key's job kept changing; try again.", field="unique_key")


def _check_concurrency_key(handler: registry.Handler, key: str) -> None:
    rules.key(key, field="concurrency_key")
    if not handler.max_running_per_key:
        raise InvalidJob(
            f"Kind {handler.kind!r} has no max_running_per_key, so a concurrency_key would limit nothing.",
            field="concurrency_key",
        )


def _check_fair_key(handler: registry.Handler, key: str) -> None:
    rules.key(key, field="fair_key")
    if not handler.fair:
        raise InvalidJob(
            f"Kind {handler.kind!r} is not fair (its handler has no fair=True), so a fair_key would share nothing.",
            field="fair_key",
        )


def submitter_fair_key(kind: str, options: JobOptions, submitted_by: Any) -> JobOptions:
    """A user's job of a fair kind is shared as that user's: its fair_key is the submitter's scope.

    So an HTTP client can neither spread its jobs over many keys to take more turns nor name
    another user's key to take theirs (the API refuses a fair_key in the body).
    """
    if submitted_by is None or options.fair_key is not None or not registry.handler_of(kind, "fair"):
        return options
    return dataclasses.replace(options, fair_key=dedupe_scope(submitted_by))


def _turn(kind: str, fair_key: str | None) -> Turn | None:
    """A job of a fair kind takes its turn among the kind's fair_keys (None for other kinds)."""
    return turn_for(fair_key) if registry.get(kind).fair else None


def _holder(kind: str, scope: str, dedupe_key: str | None, unique_key: str | None) -> Job | None:
    """The job that holds one of these keys now: the dedupe key's (forever), else the unique key's
    active one (None if it has finished since the conflict)."""
    if dedupe_key is not None:
        found: Job | None = Job.objects.filter(dedupe_scope=scope, dedupe_key=dedupe_key).first()
        if found is not None:
            return found
    if unique_key is not None:
        active: Job | None = Job.objects.filter(
            kind=kind, dedupe_scope=scope, unique_key=unique_key, status__in=[JobStatus.PENDING, JobStatus.RUNNING]
        ).first()
        return active
    return None


def check_job(kind: str, payload: dict[str, Any] | None, options: JobOptions) -> tuple[int, str]:
    """The rules applied to one job about to be stored (a workflow's member or callback): (its
    attempt budget, its payload as the JSON to store). InvalidJob or UnknownKind if it breaks one."""
    return _checked(kind, payload, options)


def _checked(
    kind: str,
    payload: dict[str, Any] | None,
    options: JobOptions,
    *,
    encoded: str | None = None,
    handler: registry.Handler | None = None,
) -> tuple[int, str]:
    """Apply the rules to one job: its attempt budget, and its payload as the JSON to store.

    With `encoded` (the API's parser applied the rules to the queue, priority, run_at and
    payload already), those are not checked twice."""
    if handler is None:
        handler = registry.get(kind)  # UnknownKind if no app registered it
    budget = _budget(handler, options.max_attempts)
    rules.max_attempts(budget)
    if encoded is None:
        rules.queue_name(options.queue)
        rules.priority(options.priority)
        rules.run_at(options.run_at)
    for name, value in (("dedupe_key", options.dedupe_key), ("unique_key", options.unique_key)):
        if value is not None:
            rules.key(value, field=name)
    if options.concurrency_key is not None:
        _check_concurrency_key(handler, options.concurrency_key)
    if options.fair_key is not None:
        _check_fair_key(handler, options.fair_key)
    if options.debounce is not None or options.debounce_max is not None:
        rules.debounce(
            options.debounce, options.debounce_max,
            unique_key=options.unique_key, dedupe_key=options.dedupe_key, run_at=options.run_at,
        )  # fmt: skip
    return budget, rules.payload(payload) if encoded is None else encoded


def enqueue_on_commit(
    kind: str, payload: dict[str, Any] | None = None, *, using: str | None = None, **options: Any
) -> None:
    """Enqueue once the caller's transaction on database `using` commits; never if it rolls back.

    For a caller whose transaction is on another database than the queue's, which enqueue cannot
    join. The job is checked now (InvalidJob, UnknownKind) with its payload as it is now, and
    stored by transaction.on_commit (at once outside a transaction). Not atomic: a process that
    dies between the commit and the enqueue loses the job, and an enqueue that fails then (the
    queue's database unreachable) raises to the code whose block committed, after its commit.
    """
    checked = JobOptions.of(options, where="enqueue_on_commit")
    _, encoded = _checked(kind, payload, checked)
    transaction.on_commit(functools.partial(enqueue, kind, json.loads(encoded), **options), using=using)


def dedupe_scope(user: Any) -> str:
    """The namespace of a dedupe key: "" for code, "user:<pk>" for a submitter."""
    return "" if user is None else f"user:{user.pk}"


BATCH_UNIQUE_KEY = "unique_key is not accepted in a batch; submit such a job on its own (POST /v1/jobs, enqueue)."


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """One job to submit, as submit_many takes it (the API's parsed submissions are these)."""

    kind: str
    payload: dict[str, Any]
    # Its dedupe_key is not used: a batch has one Idempotency-Key, submit_many's `key`. Its
    # unique_key is refused by submit_many, since one INSERT of many rows cannot answer "that job
    # already holds the key" per row (submit() takes it: POST /v1/jobs).
    options: JobOptions = field(default_factory=JobOptions)
    # The payload as the JSON to store, when the rules have already been applied (the API's parser).
    encoded: str | None = field(default=None, compare=False, repr=False)


def submit_many(
    jobs: Sequence[NewJob], *, submitted_by: Any = None, key: str | None = None, fingerprint: str = ""
) -> tuple[list[Job], bool]:
    """Store jobs of any kinds with one INSERT in the caller's transaction (or its own, in autocommit).

    All or nothing: every job is checked first, and InvalidJob names the first one that breaks a
    rule (`field` is `jobs[<index>].<field>`); a job that carries `encoded` was checked by the
    same rules already (reliableq.api.submission) and is not checked twice. One wake-up per queue
    with a due job, sent only if the transaction commits. Returns the jobs in the order given, and
    whether they were made now.

    With `submitted_by`, the batch counts against the user's MAX_PENDING_PER_SUBMITTER as a whole
    (TooManyUnfinished). With `key` (its Idempotency-Key) and the body's `fingerprint`, the key
    covers the whole batch: it is stored as the first job's dedupe_key (so the unique constraint
    decides between concurrent senders) with a BatchKey naming the batch's jobs. The same key again
    returns those jobs (False); with another fingerprint, or a key that a single submission took,
    KeyConflict.
    """
    if not jobs:
        return [], True
    jobs = [dataclasses.replace(new, options=submitter_fair_key(new.kind, new.options, submitted_by)) for new in jobs]
    rows = [_batch_row(index, new) for index, new in enumerate(jobs)]
    scope = dedupe_scope(submitted_by)
    submitter = "" if submitted_by is None else submitted_by.get_username()
    bound = pending_bound(submitted_by)
    if key is None:
        made = _insert_many(jobs, rows, submitter=submitter, scope=scope, bound=bound, key=None)
        return made, True
    rules.key(key, field="Idempotency-Key")
    try:
        with db.atomic():
            made = _insert_many(jobs, rows, submitter=submitter, scope=scope, bound=bound, key=key)
            BatchKey.objects.create(job_id=made[0].id, fingerprint=fingerprint, job_ids=[job.id for job in made])
        return made, True
    except _KeyTaken:
        pass
    except TooManyUnfinished:
        # At the bound, nothing was inserted: a resent batch still gets its jobs back.
        if not Job.objects.filter(dedupe_scope=scope, dedupe_key=key).exists():
            raise
    # The key's job exists (the unique constraint waited for its transaction to commit).
    holder = Job.objects.filter(dedupe_scope=scope, dedupe_key=key).first()
    batch = None if holder is None else BatchKey.objects.filter(job=holder).first()
    if batch is None or batch.fingerprint != fingerprint:
        taken_by = (
            "another batch" if batch is not None else f"job {holder.id}" if holder is not None else "another request"
        )
        raise KeyConflict(f"Idempotency-Key {key!r} was already used for {taken_by} with another body.")
    by_id = Job.objects.in_bulk(batch.job_ids)
    return [by_id[job_id] for job_id in batch.job_ids if job_id in by_id], False


class _KeyTaken(Exception):
    """The batch's key is the dedupe_key of a job already stored: roll the batch back."""


def _batch_row(index: int, new: NewJob) -> tuple[Any, ...]:
    """One job of a batch, checked: (id, kind, queue, priority, encoded payload, budget, run_at, concurrency_key,
    fair_key, stride: the key's stride for a fair kind, else None)."""
    try:
        handler = registry.get(new.kind)
    except registry.UnknownKind as exc:
        raise InvalidJob(f"job {index}: {exc}", field=f"jobs[{index}].kind") from None
    o = new.options
    if o.unique_key is not None:
        raise InvalidJob(f"job {index}: {BATCH_UNIQUE_KEY}", field=f"jobs[{index}].unique_key")
    budget = _budget(handler, o.max_attempts)
    encoded = new.encoded
    try:
        if encoded is None:
            rules.max_attempts(budget)
            rules.queue_name(o.queue)
            rules.priority(o.priority)
            rules.run_at(o.run_at)
            encoded = rules.payload(new.payload)
        if o.concurrency_key is not None:
            _check_concurrency_key(handler, o.concurrency_key)
        if o.fair_key is not None:
            _check_fair_key(handler, o.fair_key)
    except InvalidJob as exc:
        raise type(exc)(f"job {index}: {exc}", field=f"jobs[{index}].{exc.field}") from None
    stride = turn_for(o.fair_key).stride if handler.fair else None
    return (
        new_job_id(),
        new.kind,
        o.queue,
        o.priority,
        encoded,
        budget,
        o.run_at,
        o.concurrency_key,
        o.fair_key,
        stride,
    )


def _insert_many(
    jobs: Sequence[NewJob],
    rows: list[tuple[Any, ...]],
    *,
    submitter: str,
    scope: str,
    bound: int | None,
    key: str | None,
) -> list[Job]:
    ids, kinds, queues, priorities, payloads, budgets, run_ats, keys, fair_keys, strides = (
        list(column) for column in zip(*rows, strict=True)
    )
    with tracing.publishing(kinds[0] if len(set(kinds)) == 1 else "batch", queues[0], len(rows)) as trace_context:
        stored_context = None if trace_context is None else json.dumps(trace_context)
        columns = [key, scope, submitter, stored_context, ids, kinds, queues, priorities, payloads, budgets,
                   run_ats, keys, fair_keys, strides, len(rows)]  # fmt: skip
        now, count, later_ids, later_run_ats, _, held = statements.insert_many(
            columns, count=len(rows), scope=scope, bound=bound
        )
    if count != len(rows):
        if bound is not None and held + len(rows) > bound:
            raise TooManyUnfinished(held, bound, len(rows))
        if key is not None and count == len(rows) - 1:
            raise _KeyTaken
        raise AssertionError(f"submit_many stored {count} of {len(rows)} jobs")
    later = dict(zip(later_ids or [], later_run_ats or [], strict=True))
    made = []
    for index, (new, (job_id, kind, queue, priority, encoded, budget, _, ckey, fair_key, _)) in enumerate(
        zip(jobs, rows, strict=True)
    ):
        values = {
            "id": job_id, "kind": kind, "queue": queue, "priority": priority,
            # What a read of the row would give: the checked payload is plain JSON already.
            "payload": new.payload if new.encoded is not None else json.loads(encoded),
            "status": str(JobStatus.PENDING), "attempts": 0, "max_attempts": budget,
            "run_at": later.get(job_id, now), "lease_token": None, "lease_expires_at": None, "worker_id": "",
            "last_error": "", "dedupe_key": key if index == 0 else None,
            "dedupe_scope": scope, "submitted_by": submitter,
            "concurrency_key": ckey, "fair_key": fair_key, "unique_key": None, "snoozes": 0,
            "cancel_requested_at": None,
            "trace_context": trace_context, "progress": None, "waiting_for": None,
            "created_at": now, "updated_at": now, "finished_at": None, **_ALONE,
        }  # fmt: skip
        made.append(Job.from_db(db.alias(), _ATTNAMES, [values[name] for name in _ATTNAMES]))
    _announce([(job.id, job.kind, job.queue) for job in made])
    return made


def enqueue_many(kind: str, payloads: Iterable[dict[str, Any] | None], **options: Any) -> list[uuid.UUID]:
    """Store many jobs of one kind in the caller's transaction, with one INSERT; return their ids in order.

    The bulk form of enqueue, for imports and fan-outs: the same validation per payload, the
    same columns, time from the database, and one wake-up for the queue (sent only if the
    transaction commits). Every option of enqueue but the keys of one job (dedupe_key, unique_key:
    use enqueue for jobs that need one), applied to each job.
    """
    o = JobOptions.of(options, refused=PER_JOB, where="enqueue_many")
    budget, _ = _checked(kind, {}, o)
    queue = o.queue
    encoded = [rules.payload(payload) for payload in payloads]
    if not encoded:
        return []
    ids = [new_job_id() for _ in encoded]
    with tracing.publishing(kind, queue, len(ids)) as trace_context:
        count = statements.insert_of_kind(
            kind=kind, queue=queue, priority=o.priority, budget=budget, run_at=o.run_at,
            concurrency_key=o.concurrency_key, ids=ids, payloads=encoded, turn=_turn(kind, o.fair_key),
            trace_context=None if trace_context is None else json.dumps(trace_context),
        )  # fmt: skip
    if count != len(ids):
        raise AssertionError(f"enqueue_many stored {count} of {len(ids)} jobs")
    _announce([(job_id, kind, queue) for job_id in ids])
    return ids


REPLAYED = "Replayed: back to PENDING with the same id and effect key."
REPLAYED_FROM_THE_START = "Replayed from the start: its steps and checkpoints forgotten, back to PENDING."
CANCELLED = "Cancelled."
CANCEL_REQUESTED = "Cancel requested: the running handler is asked to stop."
PAUSED = "Paused"
RESUMED = "Resumed."


@db.retry_deadlocks
def replay(job_id: uuid.UUID | str, *, by: Any = None, restart: bool = False) -> Job:
    """Send a DEAD job back to PENDING: same id, same effect key, history kept, a fresh budget; its
    recorded steps and checkpoints kept (it resumes after them), or forgotten first with `restart`.

    Attempt numbers keep counting across replays, so the budget grows by the kind's default
    instead of `attempts` going back to zero. With `by` (a user), the change is audited in the
    same transaction, whichever way in (admin or API) it came.
    """
    with db.atomic():
        job: Job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != JobStatus.DEAD:
            raise WrongStatus(job, JobStatus.DEAD)
        budget = _budget_for(job.kind, job.max_attempts)
        if job.unique_key is not None and _holder(job.kind, job.dedupe_scope, None, job.unique_key) is not None:
            raise WrongStatus(
                job, JobStatus.DEAD, f"Job {job.id} has unique_key {job.unique_key!r}; another job with it is active."
            )
        operations.reopen(job.pk, max_attempts=job.attempts + budget, restart=restart)
        statements.notify(job.queue)
        job.refresh_from_db()
        if by is not None:
            audit.record(by, job, REPLAYED_FROM_THE_START if restart else REPLAYED)
    return job


def _budget_for(kind: str, fallback: int) -> int:
    try:
        return default_max_attempts(kind)
    except registry.UnknownKind:
        return max(1, min(fallback, int(reliableq_settings.MAX_ATTEMPTS)))


@db.retry_deadlocks
def cancel(job_id: uuid.UUID | str, *, by: Any = None) -> Job:
    """Withdraw a PENDING job (or a workflow's WAITING member) so that no worker ever claims it; ask a
    RUNNING one to stop.

    A RUNNING job gets `cancel_requested_at`: its worker learns of it at its next lease renewal
    and sets `job.cancel_requested`; the handler that then raises Cancelled (or fails) ends the
    job CANCELLED, one that succeeds anyway keeps its success. Row locks order this against the
    finish, so a cancel racing a success leaves exactly one final state: the cancel finds the
    job finished (WrongStatus), or the finish finds the request. Audited when `by` is given.
    """
    with db.atomic():
        job: Job = Job.objects.select_for_update().get(pk=job_id)
        if job.status == JobStatus.RUNNING:
            if job.cancel_requested_at is not None:
                return job  # asked already: one request, one audit entry
            Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(cancel_requested_at=Now(), updated_at=Now())
            job.refresh_from_db()
            if by is not None:
                audit.record(by, job, CANCEL_REQUESTED)
            return job
        if job.status not in (JobStatus.PENDING, JobStatus.WAITING):
            raise WrongStatus(job, "WAITING, PENDING or RUNNING")
        operations.cancel_pending(job.pk)
        job.refresh_from_db()
        if by is not None:
            audit.record(by, job, CANCELLED)
    if job.workflow_id is not None:
        graph.drain()  # the dependents the cancel handed on, now, in short transactions of their own
    return job


def pause(queue: str, *, until: dt.datetime | None = None, by: Any = None) -> QueueState:
    """Stop claims from `queue` (until `until`, by database time, or until resumed); running jobs finish.

    Takes effect for every claim that starts after this commits: the claim reads the queue's
    state in the statement that picks its jobs.
    """
    rules.queue_name(queue)
    if until is not None:
        rules.run_at(until, field="until")
    with db.atomic():
        state: QueueState
        state, _ = QueueState.objects.select_for_update().get_or_create(name=queue)
        QueueState.objects.filter(name=queue).update(
            paused_at=Now(), paused_until=until, paused_by="" if by is None else by.get_username()
        )
        state.refresh_from_db()
        if by is not None:
            audit.record(by, state, PAUSED + (f" until {until.isoformat()}" if until else ""))
    return state


def resume(queue: str, *, by: Any = None) -> QueueState:
    """Let claims take jobs of `queue` again, and wake its idle workers at once (on commit)."""
    rules.queue_name(queue)
    with db.atomic():
        # A running queue needs no row: resuming deletes it, so a name paused once (or never used)
        # leaves nothing behind.
        QueueState.objects.filter(name=queue).delete()
        state = QueueState(name=queue)
        statements.notify(queue)
        if by is not None:
            audit.record(by, state, RESUMED)
    return state


def has_work(queues: list[str] | tuple[str, ...]) -> bool:
    """Whether any job in these queues is due or running (what --burst waits for); the due jobs of
    a paused queue do not count, since no claim takes them."""
    paused = paused_queues(queues)
    return Job.objects.in_queues([q for q in queues if q not in paused]).unsettled().exists() or (
        bool(paused) and Job.objects.in_queues(list(paused)).filter(status=JobStatus.RUNNING).exists()
    )


def paused_queues(queues: Sequence[str] | None = None) -> set[str]:
    """The queues paused now, by database time (of `queues`, or all)."""
    found = QueueState.objects.filter(paused_at__isnull=False).filter(
        Q(paused_until__isnull=True) | Q(paused_until__gt=Now())
    )
    if queues is not None:
        found = found.filter(name__in=list(queues))
    return set(found.values_list("name", flat=True))
