"""Workflows: members that run after their upstream members, and callbacks that fire once per run.

    wf = reliableq.workflow(name="import 42")
    fetch = wf.add("import.fetch", {"url": url}, name="fetch")
    loads = [wf.add("import.load", {"shard": n}, after=[fetch]) for n in range(8)]
    wf.add("import.report", {}, after=loads, on_upstream_failure="run")
    wf.on("success", "import.notify", {"to": "ops"})
    record = wf.enqueue()

Nothing is written before enqueue(), which stores the whole workflow in one transaction (the
caller's, when one is open). What a member's end does is decided in the statement that ends it
(reliableq.queue.workflows).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import audit, registry, rules, tracing
from .errors import InvalidJob, KeyConflict, TooManyUnfinished, WrongStatus
from .ids import after as id_after
from .ids import job_id as new_id
from .models import OnUpstreamFailure, Workflow, WorkflowStatus
from .options import PER_JOB, JobOptions
from .queue import db
from .queue import workflows as statements
from .queue.fairness import turn_for

MAX_MEMBERS = 10_000
MAX_AFTER = 100_000  # `after` entries in all: what the edges, the statements that walk them and a read cost
EVENTS = ("success", "failure", "complete")
CANCELLED = "Cancelled the workflow"


class InvalidWorkflow(InvalidJob):
    """A workflow that cannot be stored, with the indexes of the members (or callbacks) at fault."""

    def __init__(self, message: str, *, indexes: Sequence[int] = (), field: str = "members") -> None:
        self.indexes = list(indexes)
        super().__init__(message, field=field)


@dataclass(frozen=True, slots=True)
class Member:
    """A member added to a builder: pass it in another member's `after`."""

    id: uuid.UUID
    name: str
    index: int


@dataclass(slots=True)
class _Planned:
    kind: str
    payload: dict[str, Any] | None
    name: str
    after: list[Member | str]
    on_upstream_failure: str
    options: JobOptions


@dataclass(slots=True)
class WorkflowBuilder:
    """What reliableq.workflow() returns: add members and callbacks, then enqueue() them all."""

    name: str = ""
    _members: list[_Planned] = field(default_factory=list)
    _ids: list[uuid.UUID] = field(default_factory=list)
    _callbacks: dict[str, tuple[str, dict[str, Any] | None, JobOptions]] = field(default_factory=dict)

    def add(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        after: Iterable[Member | str] = (),
        on_upstream_failure: str = OnUpstreamFailure.CANCEL,
        **options: Any,
    ) -> Member:
        """A member of `kind`, run once every member in `after` succeeded (any enqueue option but the keys).

        A member of a fair kind takes its fair_key's turn when it becomes PENDING (at enqueue for a
        member with no upstream, else at its release), so a released fan-out queues behind the other
        keys' due work as a batch of that key would."""
        member_id = id_after(self._ids[-1] if self._ids else None)  # members listed in id order: as added
        index = len(self._members)
        label = str(member_id) if name is None else name
        self._members.append(
            _Planned(
                kind=kind,
                payload=payload,
                name=label,
                after=list(after),
                on_upstream_failure=on_upstream_failure,
                options=JobOptions.of(options, refused=PER_JOB, where="workflow.add"),
            )
        )
        self._ids.append(member_id)
        return Member(member_id, label, index)

    def on(self, event: str, kind: str, payload: dict[str, Any] | None = None, **options: Any) -> None:
        """A callback job of `kind` for `event` (success, failure or complete), enqueued once per run."""
        if event not in EVENTS:
            raise InvalidWorkflow(
                f"A callback's event is one of {', '.join(EVENTS)}, not {event!r}.", field="callbacks"
            )
        # A callback is due when its run decides it, and its own: no run_at, no concurrency_key.
        refused = (*PER_JOB, "run_at", "concurrency_key")
        self._callbacks[event] = (kind, payload, JobOptions.of(options, refused=refused, where="workflow.on"))

    def enqueue(self, *, submitted_by: Any = None, dedupe_key: str | None = None) -> Workflow:
        """Store the workflow (its members, edges and counts) in one transaction; return it."""
        workflow, _ = store(self, submitted_by=submitted_by, dedupe_key=dedupe_key)
        return workflow


def workflow(name: str = "") -> WorkflowBuilder:
    """A new workflow's builder; nothing is written until its enqueue()."""
    try:
        rules.label(name, field="name", what="A workflow's name", required=False)
    except InvalidJob as exc:
        raise InvalidWorkflow(str(exc), field="name") from None
    return WorkflowBuilder(name=name)


def _members(builder: WorkflowBuilder, submitted_by: Any = None) -> list[statements.NewMember]:
    """Check every member; the members to store, each with its upstream ids. InvalidWorkflow names the indexes."""
    from .services import submitter_fair_key

    planned = builder._members
    if not planned:
        raise InvalidWorkflow("A workflow needs at least one member.")
    if len(planned) > MAX_MEMBERS:
        raise InvalidWorkflow(f"A workflow has at most {MAX_MEMBERS} members, not {len(planned)}.", field="members")
    entries = sum(len(p.after) for p in planned)
    if entries > MAX_AFTER:
        raise InvalidWorkflow(
            f"A workflow has at most {MAX_AFTER:,} `after` entries in all, not {entries:,}.", field="members"
        )
    by_name: dict[str, int] = {}
    duplicates = []
    try:
        rules.label(builder.name, field="name", what="A workflow's name", required=False)
    except InvalidJob as exc:
        raise InvalidWorkflow(str(exc), field="name") from None
    for index, p in enumerate(planned):
        try:
            rules.label(p.name, field="name", what=f"Member {index}: a name")
        except InvalidJob as exc:
            raise InvalidWorkflow(str(exc), indexes=[index], field="name") from None
        if p.name in by_name:
            duplicates.append(index)
        by_name.setdefault(p.name, index)
    if duplicates:
        named = "; ".join(f"member {i} repeats {planned[i].name!r}, the name of member {by_name[planned[i].name]}"
                          for i in duplicates[:10])  # fmt: skip
        more = f" (and {len(duplicates) - 10} more)" if len(duplicates) > 10 else ""
        raise InvalidWorkflow(f"Each member needs a name of its own: {named}{more}.", indexes=duplicates)
    ids = builder._ids
    upstream: list[list[int]] = []
    unknown = []
    for index, p in enumerate(planned):
        found = []
        for ref in p.after:
            at = ref.index if isinstance(ref, Member) and ids[ref.index : ref.index + 1] == [ref.id] else None
            if at is None and isinstance(ref, str):
                at = by_name.get(ref)
            if at is None or at == index:
                unknown.append(index)
                break
            found.append(at)
        upstream.append(sorted(set(found)))
    if unknown:
        raise InvalidWorkflow(
            f"Members {', '.join(map(str, unknown))} name in `after` a member that is not in this workflow "
            "(or themselves).",
            indexes=unknown,
        )
    cycle = _cycle(upstream)
    if cycle:
        raise InvalidWorkflow(f"Members {', '.join(map(str, cycle))} wait for each other in a cycle.", indexes=cycle)
    made = []
    for index, p in enumerate(planned):
        if p.on_upstream_failure not in OnUpstreamFailure.values:
            raise InvalidWorkflow(
                f"Member {index}: on_upstream_failure is 'cancel' or 'run', not {p.on_upstream_failure!r}.",
                indexes=[index],
            )
        options = submitter_fair_key(p.kind, p.options, submitted_by)
        budget, encoded = _checked(index, p.kind, p.payload, options)
        made.append(
            statements.NewMember(
                id=ids[index],
                name=p.name,
                kind=p.kind,
                queue=p.options.queue,
                priority=p.options.priority,
                payload=encoded,
                max_attempts=budget,
                run_at=p.options.run_at,
                concurrency_key=p.options.concurrency_key,
                on_upstream_failure=p.on_upstream_failure,
                after=tuple(ids[u] for u in upstream[index]),
                fair_key=options.fair_key,
                stride=_stride(p.kind, options.fair_key),
            )
        )
    return made


def _stride(kind: str, fair_key: str | None) -> float | None:
    """A fair kind's job's stride (its turn's step), else None."""
    return turn_for(fair_key).stride if registry.handler_of(kind, "fair") else None


def _checked(index: int, kind: str, payload: dict[str, Any] | None, options: JobOptions) -> tuple[int, str]:
    from .services import check_job

    try:
        return check_job(kind, payload, options)
    except InvalidJob as exc:
        raise InvalidWorkflow(f"Member {index}: {exc}", indexes=[index], field=exc.field) from exc
    except registry.UnknownKind as exc:
        raise InvalidWorkflow(f"Member {index}: {exc}", indexes=[index], field="kind") from exc


def _cycle(upstream: list[list[int]]) -> list[int]:
    """The members on or behind a cycle of `after` (empty: none), by Kahn's algorithm."""
    waiting = [len(ups) for ups in upstream]
    down: list[list[int]] = [[] for _ in upstream]
    for index, ups in enumerate(upstream):
        for u in ups:
            down[u].append(index)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    while ready:
        i = ready.pop()
        for d in down[i]:
            waiting[d] -= 1
            if waiting[d] == 0:
                ready.append(d)
    return [i for i, n in enumerate(waiting) if n > 0]


def _callbacks(builder: WorkflowBuilder, submitted_by: Any = None) -> dict[str, dict[str, Any]]:
    from .services import check_job, submitter_fair_key

    made = {}
    for event, (kind, payload, options) in builder._callbacks.items():
        options = submitter_fair_key(kind, options, submitted_by)
        try:
            budget, encoded = check_job(kind, payload, options)
        except (InvalidJob, registry.UnknownKind) as exc:
            raise InvalidWorkflow(f"Callback {event!r}: {exc}", field="callbacks") from exc
        made[event] = {
            "kind": kind,
            "payload": json.loads(encoded),
            "queue": options.queue,
            "priority": options.priority,
            "max_attempts": budget,
        }
        stride = _stride(kind, options.fair_key)
        if stride is not None:  # a fair kind: the callback takes its key's turn when it is enqueued
            made[event] |= {"fair_key": options.fair_key, "stride": stride}
    return made


def fingerprint(members: Sequence[statements.NewMember], callbacks: dict[str, Any], name: str) -> str:
    """What a retried submission must repeat for its Idempotency-Key to return the same workflow
    (upstream members by position: ids are new on every submission)."""
    position = {m.id: i for i, m in enumerate(members)}
    canonical = json.dumps(
        {
            "name": name,
            "members": [
                [m.name, m.kind, m.queue, m.priority, json.loads(m.payload), m.on_upstream_failure,
                 sorted(position[a] for a in m.after)]
                for m in members
            ],
            "callbacks": callbacks,
        },
        sort_keys=True,
        default=str,
    )  # fmt: skip
    return hashlib.sha256(canonical.encode()).hexdigest()


def store(
    builder: WorkflowBuilder, *, submitted_by: Any = None, dedupe_key: str | None = None
) -> tuple[Workflow, bool]:
    """Check and store a builder's workflow; (the workflow, True) or, when `dedupe_key` found one of
    this submitter, (that workflow, False). Members name their upstream by the ids assigned at add()."""
    from .services import dedupe_scope, pending_bound

    members = _members(builder, submitted_by)
    callbacks = _callbacks(builder, submitted_by)
    scope = dedupe_scope(submitted_by)
    submitter = "" if submitted_by is None else submitted_by.get_username()
    workflow_id = new_id()
    print_ = fingerprint(members, callbacks, builder.name) if dedupe_key else ""
    bound = pending_bound(submitted_by)
    with db.atomic(), tracing.publishing("workflow", members[0].queue) as trace_context:
        if bound is not None:
            # Every member counts, WAITING ones too, and each callback: they are rows the submitter
            # makes. Concurrent submissions each count in their own snapshot, as for batches.
            held = statements.held(scope, bound)
            if held + len(members) + len(callbacks) > bound:
                raise TooManyUnfinished(held, bound, adding=len(members) + len(callbacks))
        made = statements.store(
            workflow_id=workflow_id,
            name=builder.name,
            members=members,
            callbacks=callbacks,
            dedupe_key=dedupe_key,
            scope=scope,
            fingerprint=print_,
            submitted_by=submitter,
            trace_context=None if trace_context is None else json.dumps(trace_context),
        )
    if not made:
        found = Workflow.objects.get(dedupe_scope=scope, dedupe_key=dedupe_key)
        if found.fingerprint != print_:
            raise KeyConflict(
                f"Idempotency-Key {dedupe_key!r} was already used for workflow {found.pk} with another body."
            )
        return found, False
    return Workflow.objects.get(pk=workflow_id), True


@db.retry_deadlocks
def cancel_workflow(workflow_id: uuid.UUID | str, *, by: Any = None) -> Workflow:
    """Cancel a RUNNING workflow: WAITING and PENDING members now, RUNNING ones asked to stop
    (cooperatively, as reliableq.services.cancel). WrongStatus if it has finished."""
    found: Workflow = Workflow.objects.get(pk=workflow_id)
    with db.atomic():
        done = statements.cancel(found.pk)
        found.refresh_from_db()
        if done is None and found.status == WorkflowStatus.RUNNING:
            return found  # asked already: one request, one audit entry
        if done is None:
            message = f"Workflow {found.pk} is {found.status}; nothing to cancel."
            raise WrongStatus(found, WorkflowStatus.RUNNING, message)
        if by is not None:
            audit.record(by, found, f"{CANCELLED}: {done[0]} member(s) cancelled, {done[1]} asked to stop.")
    return found
