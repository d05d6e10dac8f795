"""Enqueue: the rules a new job must meet, and its INSERT (one job, a batch, many of one kind)."""

from __future__ import annotations

import dataclasses
import functools
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from .. import registry, rules, signals, tracing
from ..conf import reliableq_settings
from ..errors import InvalidJob, KeyConflict, TooManyUnfinished
from ..ids import job_id as new_job_id
from ..models import BatchKey, Job, JobStatus
from ..options import PER_JOB, JobOptions
from ..queue import db
from ..queue import enqueue as statements
from ..queue.fairness import Turn, turn_for

# fair_seq is decided by the INSERT (a fair job's turn): left out, it is read from the row if asked for.
_ATTNAMES = [f.attname for f in Job._meta.concrete_fields if f.attname != "fair_seq"]
# The columns of a job just inserted that no caller chooses: a new job is PENDING, unleased, unfinished,
# of no workflow.
_NEW = {
    "status": str(JobStatus.PENDING), "attempts": 0, "lease_token": None, "lease_expires_at": None,
    "worker_id": "", "last_error": "", "snoozes": 0, "replayed_at_attempt": 0, "cancel_requested_at": None,
    "progress": None,
    "waiting_for": None, "finished_at": None, "workflow_id": None, "member_name": None, "on_upstream_failure": "",
}  # fmt: skip


def stored_job(**chosen: Any) -> Job:
    """The Job an INSERT of one row just stored, as a read of the row would give it, with no read:
    `chosen` is every column the insert set or the database decided (the others are _NEW's)."""
    values = {**_NEW, **chosen}
    job: Job = Job.from_db(db.alias(), _ATTNAMES, [values[name] for name in _ATTNAMES])
    return job


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
    return stored_job(
        id=job_id, kind=kind, queue=queue, priority=priority, payload=json.loads(encoded), max_attempts=budget,
        run_at=stored_run_at, dedupe_key=dedupe_key, dedupe_scope=scope, submitted_by=submitter,
        concurrency_key=o.concurrency_key, fair_key=o.fair_key, unique_key=unique_key, trace_context=trace_context,
        created_at=created_at, updated_at=updated_at,
    ), True  # fmt: skip


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
    keys = dedupe_key is not None or unique_key is not None
    for _ in range(3):
        job_id = new_job_id()
        row, held = statements.insert_one([job_id, *columns], scope=scope, bound=bound, keys=keys, turn=turn)
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
    try:
        # The batch's one key is submit_many's: a job's own dedupe_key is not used, so not checked.
        checked = o if o.dedupe_key is None else dataclasses.replace(o, dedupe_key=None)
        budget, encoded = _checked(new.kind, new.payload, checked, encoded=new.encoded)
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
        made.append(
            stored_job(
                id=job_id, kind=kind, queue=queue, priority=priority,
                # What a read of the row would give: the checked payload is plain JSON already.
                payload=new.payload if new.encoded is not None else json.loads(encoded),
                max_attempts=budget, run_at=later.get(job_id, now), dedupe_key=key if index == 0 else None,
                dedupe_scope=scope, submitted_by=submitter, concurrency_key=ckey, fair_key=fair_key,
                unique_key=None, trace_context=trace_context, created_at=now, updated_at=now,
            )
        )  # fmt: skip
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
