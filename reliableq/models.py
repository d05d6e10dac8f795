"""Jobs and their attempts: the durable state of the queue."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from django.db import models
from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Now

from . import ids
from .conf import queue_alias
from .fields import BigIntegerArrayField, IntegerArrayField, UUIDArrayField


class JobStatus(models.TextChoices):
    WAITING = "WAITING"  # a workflow member whose upstream members have not all succeeded; never claimed
    PENDING = "PENDING"  # waiting for run_at, then for a free worker slot
    RUNNING = "RUNNING"  # claimed under a lease; its owner renews it while the handler runs
    SUCCEEDED = "SUCCEEDED"  # finalized under the lease of its last attempt
    DEAD = "DEAD"  # permanent error or budget used up; waits for a person to replay it
    CANCELLED = "CANCELLED"  # withdrawn before it ran, or stopped by its handler on request


class Outcome(models.TextChoices):
    RUNNING = "RUNNING"  # the attempt's handler has not reported yet
    SUCCEEDED = "SUCCEEDED"  # the handler returned and the finalize passed the fence
    FAILED_TRANSIENT = "FAILED_TRANSIENT"  # the handler raised something worth retrying
    FAILED_PERMANENT = "FAILED_PERMANENT"  # the handler raised PermanentError
    TIMED_OUT = "TIMED_OUT"  # the handler outlived its timeout; the job was retried without it
    LEASE_EXPIRED = "LEASE_EXPIRED"  # the owner stopped renewing; another worker took the job back
    LEASE_LOST = "LEASE_LOST"  # the owner found its token no longer matched the job
    SNOOZED = "SNOOZED"  # the handler raised Snooze: the job waits again, the attempt is given back
    CANCELLED = "CANCELLED"  # an operator asked to cancel and the handler stopped


FINISHED = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
UNFINISHED = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)


class WorkflowStatus(models.TextChoices):
    RUNNING = "RUNNING"  # some member has not finished
    SUCCEEDED = "SUCCEEDED"  # every member succeeded
    FAILED = "FAILED"  # every member finished, some DEAD or CANCELLED
    CANCELLED = "CANCELLED"  # an operator cancelled it (reliableq.cancel_workflow)


class OnUpstreamFailure(models.TextChoices):
    CANCEL = "cancel"  # a DEAD or CANCELLED upstream member cancels this one
    RUN = "run"  # this one runs once every upstream member is finished, however it ended


_M = TypeVar("_M", bound=models.Model)


class QueueManager(models.Manager[_M]):
    """Reads and writes the queue's database (RELIABLEQ["DATABASE"]), unless told another by db_manager().

    Every manager of the queue's models is one, so the admin's querysets, DRF views, related
    managers (job.attempt_set) and prefetches reach the queue's tables without a database router.
    """

    def get_queryset(self) -> models.QuerySet[_M]:
        queryset = super().get_queryset()
        return queryset if self._db is not None else queryset.using(queue_alias())


class JobQuerySet(models.QuerySet["Job"]):
    def in_queues(self, queues: list[str] | tuple[str, ...]) -> JobQuerySet:
        return cast(JobQuerySet, self.filter(queue__in=list(queues)))

    def due(self) -> JobQuerySet:
        """PENDING jobs whose run_at has come, by database time."""
        return cast(JobQuerySet, self.filter(status=JobStatus.PENDING, run_at__lte=Now()))

    def expired(self) -> JobQuerySet:
        """RUNNING jobs whose owner stopped renewing the lease."""
        return cast(JobQuerySet, self.filter(status=JobStatus.RUNNING, lease_expires_at__lte=Now()))

    def unsettled(self) -> JobQuerySet:
        """Jobs a worker still has to act on: due PENDING ones and every RUNNING one."""
        return cast(
            JobQuerySet, self.filter(Q(status=JobStatus.PENDING, run_at__lte=Now()) | Q(status=JobStatus.RUNNING))
        )

    def finished(self) -> JobQuerySet:
        return cast(JobQuerySet, self.filter(status__in=FINISHED))


class Workflow(models.Model):
    """Jobs that run in an order (each member after its `after` members) and callbacks that fire once.

    The row is written at enqueue and at the end of each run (every member finished); a member's
    finish never touches it otherwise: what finished is counted in WorkflowCount rows, spread over
    shards, so the members of a large fan-in do not queue for one row (reliableq.queue.workflows).
    """

    id = models.UUIDField(primary_key=True, default=ids.job_id, editable=False)
    name = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=16, choices=WorkflowStatus.choices, default=WorkflowStatus.RUNNING)
    # A replay of a DEAD member starts a new run: its callbacks can fire again, once per run.
    run = models.PositiveIntegerField(default=1)
    members = models.PositiveIntegerField(default=0)
    # {event: {kind, payload, queue, priority, max_attempts}} for success, failure and complete.
    callbacks = models.JSONField(default=dict, blank=True)
    dedupe_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001  NULL: no key
    dedupe_scope = models.CharField(max_length=80, blank=True, default="", editable=False)
    fingerprint = models.CharField(max_length=64, blank=True, default="", editable=False)
    submitted_by = models.CharField(max_length=150, blank=True, default="", editable=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = QueueManager["Workflow"]()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["-created_at"], name="reliableq_workflow_created")]
        constraints = [
            models.UniqueConstraint(
                fields=["dedupe_scope", "dedupe_key"],
                condition=Q(dedupe_key__isnull=False),
                name="reliableq_workflow_dedupe_unique",
            ),
            models.CheckConstraint(
                condition=Q(status__in=WorkflowStatus.values), name="reliableq_workflow_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"workflow {self.name or self.id} ({self.status})"


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=ids.job_id, editable=False)
    kind = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
    priority = models.IntegerField(default=0, help_text="Lower runs first.")
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="Counted at claim.")
    max_attempts = models.PositiveIntegerField(default=5)
    run_at = models.DateTimeField(db_default=Now())
    lease_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    worker_id = models.CharField(max_length=200, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    # Unique within its scope: "" for Python callers (and cron), "user:<pk>" for an HTTP submitter,
    # so one user's Idempotency-Key never meets another user's or an internal key.
    dedupe_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001  NULL: no key (never equal in unique constraints)
    dedupe_scope = models.CharField(max_length=80, blank=True, default="", db_default="", editable=False)
    # Who submitted the job over HTTP: the user name at the time ("" when code enqueued it). A
    # record, not a foreign key: it outlives the account, and the queue may live in a database of
    # its own (RELIABLEQ["DATABASE"]) where no foreign key to the users' table can exist.
    submitted_by = models.CharField(max_length=150, blank=True, default="", db_default="", editable=False)
    # Flow control. With the handler's max_running_per_key, at most that many jobs of the kind and
    # this key are RUNNING at once, fleet-wide (decided in the claim transaction).
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001  NULL: no key (never equal in unique constraints)
    # Fair share. With the handler's fair=True, claims of the kind rotate among fair_keys: fair_seq is the
    # job's turn, fixed at enqueue (the key's last turn plus one, never before the kind's current head),
    # and a claim takes due jobs in that order (reliableq.queue.fairness). NULL for other kinds.
    fair_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001  NULL: the kind's one unnamed key
    fair_seq = models.FloatField(null=True, blank=True, editable=False)
    # At most one PENDING or RUNNING job per (kind, scope, unique_key); a new one after it finishes.
    unique_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001  NULL: no key (never equal in unique constraints)
    # How often the handler said "come back later" (Snooze); each one gave its attempt back.
    snoozes = models.PositiveIntegerField(default=0, db_default=0)
    # `attempts` when the job was last replayed (0: never): attempt numbers go on counting across
    # replays, so this run's attempts are attempts minus this, and its budget max_attempts minus this.
    replayed_at_attempt = models.PositiveIntegerField(default=0, db_default=0, editable=False)
    # When an operator asked to stop this RUNNING job; its worker learns of it at the next renewal.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # The enqueuing span's W3C trace context ({"traceparent": ..., "tracestate": ...}) when
    # OpenTelemetry is installed and a span was active: each attempt's span is its child.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    # What the running handler last said of its progress ({done, total, note, at}), via job.progress().
    progress = models.JSONField(null=True, blank=True, editable=False)
    # The event a WAITING job waits for (job.wait_for): an emit of that name makes it PENDING; its
    # run_at is then when the wait times out (9999-12-31: never). NULL for every other job.
    waiting_for = models.CharField(max_length=255, null=True, blank=True, editable=False)  # noqa: DJ001  NULL: none
    # A workflow's member (member_name set) or callback (member_name NULL); NULL for a job alone.
    workflow = models.ForeignKey(
        Workflow, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs", db_index=False
    )
    member_name = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001  NULL: not a member
    # A member's "cancel" or "run" when an upstream member fails; "" for a root (it has none) and a job alone.
    on_upstream_failure = models.CharField(
        max_length=8, choices=OnUpstreamFailure.choices, blank=True, default="", db_default=""
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = QueueManager.from_queryset(JobQuerySet)()

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("submit_job", "Can submit jobs over HTTP"),
            ("replay_job", "Can replay a dead job"),
            ("cancel_job", "Can cancel a job"),
            ("pause_queue", "Can pause and resume a queue"),
        ]
        indexes = [
            # The claim: due PENDING rows of some queues, best priority first; the id orders rows due at
            # the same time, so a claim can start exactly where the last one stopped (reliableq.floors).
            models.Index(
                fields=["queue", "priority", "run_at", "id"],
                condition=Q(status="PENDING"),
                name="reliableq_job_due",
            ),
            # A fair kind's due jobs in turn order, and each key's last turn (reliableq.queue.fairness).
            # Only jobs with a turn enter them: other kinds pay no index write for fairness.
            models.Index(
                fields=["queue", "kind", "priority", "fair_seq", "id"],
                condition=Q(status="PENDING", fair_seq__isnull=False),
                name="reliableq_job_fair_due",
            ),
            # The keys' last turns: keyed jobs in one, the kind's keyless jobs in another. Each names the key in
            # its predicate, which a pick never does: however stale the statistics, a pick cannot take them
            # for reliableq_job_fair_due and sort what they hold.
            models.Index(
                fields=["queue", "kind", "priority", "fair_key", "fair_seq"],
                condition=Q(status="PENDING", fair_seq__isnull=False, fair_key__isnull=False),
                name="reliableq_job_fair_key",
            ),
            models.Index(
                fields=["queue", "kind", "priority", "fair_seq"],
                condition=Q(status="PENDING", fair_seq__isnull=False, fair_key__isnull=True),
                name="reliableq_job_fair_nokey",
            ),
            # An emit's wake-up: the jobs waiting for one event; and the waits that time out, by when.
            models.Index(
                fields=["waiting_for"],
                condition=Q(status="WAITING", waiting_for__isnull=False),
                name="reliableq_job_waiting_for",
            ),
            models.Index(
                fields=["run_at"],
                condition=Q(status="WAITING", waiting_for__isnull=False),
                name="reliableq_job_wait_until",
            ),
            # Recovery: RUNNING rows whose lease ran out.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="RUNNING"),
                name="reliableq_job_lease",
            ),
            # The admin: newest first, overall and within a status, a queue or a kind.
            models.Index(fields=["-created_at"], name="reliableq_job_created"),
            # Within a status, only for the ones an operator lists to act on: every index that all rows
            # enter costs three insertions per job (no update of a job is HOT), and the other statuses
            # list well enough from the created index (RUNNING from the lease index: a fleet's worth).
            models.Index(
                fields=["status", "-created_at"],
                condition=Q(status__in=["DEAD", "CANCELLED"]),
                name="reliableq_job_settled_created",
            ),
            # Also the queues' names, read by a loose index scan (stats.queues()) on every list page.
            models.Index(fields=["queue", "-created_at"], name="reliableq_job_queue_created"),
            models.Index(fields=["kind", "-created_at"], name="reliableq_job_kind_created"),
            # Per-key limits: the RUNNING jobs of one (kind, concurrency_key).
            models.Index(
                fields=["kind", "concurrency_key"],
                condition=Q(status="RUNNING", concurrency_key__isnull=False),
                name="reliableq_job_key_running",
            ),
            # Pruning: finished rows by age.
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="reliableq_job_finished",
            ),
            # MAX_PENDING_PER_SUBMITTER: an HTTP submitter's unfinished jobs, counted at each submission.
            # Only jobs submitted over HTTP enter it (code's scope is ""), so the worker's rows never do.
            models.Index(
                fields=["dedupe_scope"],
                condition=Q(status__in=["WAITING", "PENDING", "RUNNING"]) & ~Q(dedupe_scope=""),
                name="reliableq_job_submitter_open",
            ),
            # A workflow's jobs (its page, its cancel, retention); jobs alone never enter it.
            models.Index(fields=["workflow"], condition=Q(workflow__isnull=False), name="reliableq_job_workflow"),
        ]
        constraints = [
            # Only keyed jobs enter it: an index entry per version of every keyless job (most of them)
            # was three more index writes per job, for rows no conflict can ever involve.
            models.UniqueConstraint(
                fields=["dedupe_scope", "dedupe_key"],
                condition=Q(dedupe_key__isnull=False),
                name="reliableq_job_dedupe_unique",
            ),
            # unique_key: one active job per (kind, scope, key); finished ones leave the index.
            models.UniqueConstraint(
                fields=["kind", "dedupe_scope", "unique_key"],
                condition=Q(unique_key__isnull=False, status__in=["PENDING", "RUNNING"]),
                name="reliableq_job_unique_active",
            ),
            models.CheckConstraint(condition=Q(status__in=JobStatus.values), name="reliableq_job_status_valid"),
            models.CheckConstraint(
                condition=Q(status="RUNNING", lease_token__isnull=False)
                | (~Q(status="RUNNING") & Q(lease_token__isnull=True)),
                name="reliableq_job_token_iff_running",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"

    @property
    def callback(self) -> tuple[str, str]:
        """A workflow's callback job's (run, event), read from its dedupe key
        `workflow:<workflow id>:<run>:<event>`; ("", "") for any other job."""
        if self.workflow_id is None or self.member_name is not None or not self.dedupe_key:
            return "", ""
        return callback_of(self.dedupe_key)

    @property
    def effect_key(self) -> str:
        """The idempotency key sent on every attempt and every replay."""
        return f"reliableq:{self.kind}:{self.id}"

    @property
    def result(self) -> Any:
        """What the handler returned, for a SUCCEEDED job of a kind with keep_result=True (else None)."""
        try:
            return self.return_value.value
        except ReturnValue.DoesNotExist:
            return None


def callback_of(dedupe_key: str | None) -> tuple[str, str]:
    """(run, event) of a callback's dedupe key `workflow:<workflow id>:<run>:<event>`."""
    parts = (dedupe_key or "").split(":")
    return (parts[2], parts[3]) if len(parts) == 4 else ("", "")


class WorkflowEdge(models.Model):
    """`upstream`'s end counts toward `target`: a downstream member, or the workflow itself (every
    member has an edge to its workflow). `shard` is the target's WorkflowCount row it counts in."""

    id = models.BigAutoField(primary_key=True)
    # Plain ids, not foreign keys: the rows go with their workflow (retention deletes them together),
    # while a member's job row may be pruned first.
    upstream = models.UUIDField()
    target = models.UUIDField()  # a Job's id or the Workflow's id
    shard = models.SmallIntegerField()
    workflow = models.UUIDField()

    objects = QueueManager["WorkflowEdge"]()

    class Meta:
        indexes = [
            models.Index(fields=["upstream", "target"], name="reliableq_edge_upstream"),
            models.Index(fields=["target"], name="reliableq_edge_target"),
            models.Index(fields=["workflow"], name="reliableq_edge_workflow"),
        ]

    def __str__(self) -> str:
        return f"{self.upstream} -> {self.target}"


class WorkflowCount(models.Model):
    """How many of a target's upstream members have not finished (`remaining`) and how many ended
    DEAD or CANCELLED (`failed`), in one shard of them. Shard -1 is the target's total: the number
    of its other shards still above zero (or, for a target of few upstreams, the count itself)."""

    id = models.BigAutoField(primary_key=True)
    target = models.UUIDField()
    shard = models.SmallIntegerField()
    remaining = models.IntegerField()
    failed = models.IntegerField(default=0)
    workflow = models.UUIDField()

    objects = QueueManager["WorkflowCount"]()

    class Meta:
        indexes = [models.Index(fields=["workflow"], name="reliableq_count_workflow")]
        constraints = [models.UniqueConstraint(fields=["target", "shard"], name="reliableq_count_target_shard")]

    def __str__(self) -> str:
        return f"{self.remaining} left of {self.target} (shard {self.shard})"


class StepKind(models.TextChoices):
    STEP = "STEP"  # job.step(): a function's recorded value, returned instead of calling it again
    CHECKPOINT = "CHECKPOINT"  # job.checkpoint(): the last value saved under a name
    SLEEP = "SLEEP"  # job.sleep(): {"until": when it ends, epoch seconds of the database's clock}
    EVENT = "EVENT"  # job.wait_for(): {"until": its timeout} while it waits, {"payload": ...} once emitted


class Step(models.Model):
    """What a job recorded of its progress: a step's value, a checkpoint, a sleep, an event waited for.

    Written by the attempt that holds the job's lease, fenced by its token, and committed before the
    handler goes on; every later attempt of the job reads it back (job.step returns the value)."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps", db_index=False)
    name = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=StepKind.choices)
    value = models.JSONField(null=True, blank=True)
    attempt = models.PositiveIntegerField()  # the attempt that recorded it (last, for a checkpoint)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects = QueueManager["Step"]()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="reliableq_step_job_name")]
        indexes = [
            # The sleeps by when they end: the sleeping jobs' count (reliableq.queue.parked) reads only the
            # sleeps not over yet, however many ended sleeps the table keeps. Other kinds write no entry.
            models.Index(
                Cast(KeyTextTransform("until", "value"), models.FloatField()),
                condition=Q(kind="SLEEP"),
                name="reliableq_step_sleep_until",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind.lower()} {self.name} of {self.job_id}"


class Event(models.Model):
    """An event emitted by name (reliableq.emit, POST /v1/events/<name>): recorded once, it made every
    job waiting for it PENDING in the transaction that emitted it."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=255, unique=True)
    payload = models.JSONField(null=True, blank=True)
    emitted_at = models.DateTimeField(db_default=Now())
    emitted_by = models.CharField(max_length=150, blank=True, default="", db_default="")  # a user's name, or ""

    objects = QueueManager["Event"]()

    class Meta:
        indexes = [models.Index(fields=["emitted_at"], name="reliableq_event_emitted")]
        permissions = [("emit_event", "Can emit events over HTTP")]

    def __str__(self) -> str:
        return f"event {self.name}"


class WorkflowCascade(models.Model):
    """A WAITING member a cancel found doomed and left: a statement's own walk of the graph stops
    after a bound (reliableq.queue.graph.WALK) and hands the rest on here, to be cancelled, and
    walked from, in short transactions of their own."""

    id = models.BigAutoField(primary_key=True)
    member = models.UUIDField(unique=True)
    workflow = models.UUIDField()
    created_at = models.DateTimeField(db_default=Now())

    objects = QueueManager["WorkflowCascade"]()

    def __str__(self) -> str:
        return f"cascade from {self.member}"


class Attempt(models.Model):
    id = models.BigAutoField(primary_key=True)
    # No index of its own: the (job, number) constraint's index leads with the job and serves every
    # lookup by job; a second one was a fourth index write per attempt.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_set", db_index=False)
    number = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=200)
    lease_token = models.UUIDField()
    started_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.RUNNING)
    error = models.TextField(blank=True, default="")
    # A failed attempt's traceback, as Python formats it, redacted and bounded (empty otherwise).
    traceback = models.TextField(blank=True, default="", db_default="")

    objects = QueueManager["Attempt"]()

    class Meta:
        ordering = ["job", "number"]
        indexes = [
            # The dashboard's "attempts in the last hour".
            models.Index(fields=["started_at"], name="reliableq_attempt_started"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="reliableq_attempt_number_unique"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.job_id} ({self.outcome})"


class ReturnValue(models.Model):
    """A handler's return value, kept for handlers that ask for it (the Tasks backend's get_result).

    Written in the finish transaction, under the same fence: a stale attempt's value is never kept.
    """

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="return_value")
    value = models.JSONField(null=True)

    objects = QueueManager["ReturnValue"]()

    def __str__(self) -> str:
        return f"return value of {self.job_id}"


class BatchKey(models.Model):
    """An Idempotency-Key sent with POST /v1/jobs/batch: the batch's body and its jobs, in order.

    The key itself is the dedupe_key of the batch's first job, so the unique constraint that
    guards single submissions guards batches too (and a key used for one cannot be used for the
    other); this row says which body made the batch and which jobs it made. Pruned with that job.
    """

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="batch_key")
    fingerprint = models.CharField(max_length=64)  # sha256 of the batch's jobs as canonical JSON
    job_ids = UUIDArrayField()

    objects = QueueManager["BatchKey"]()

    def __str__(self) -> str:
        return f"batch of {len(self.job_ids)} job(s) from {self.job_id}"


class QueueDashboard(Job):
    """No table of its own: it gives the admin index a "Queue dashboard" entry."""

    class Meta:
        proxy = True
        verbose_name = "queue dashboard"
        verbose_name_plural = "queue dashboard"
        default_permissions = ()


class QueueState(models.Model):
    """A queue an operator paused (optionally until a time). No row, or paused_at NULL: it runs.

    Claims read this table in the same statement that picks jobs, so a pause takes effect for
    every claim that starts after it commits; running jobs finish.
    """

    name = models.CharField(max_length=100, primary_key=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True, help_text="Empty: until resumed.")
    paused_by = models.CharField(max_length=150, blank=True, default="")

    objects = QueueManager["QueueState"]()

    class Meta:
        verbose_name = "queue"

    def __str__(self) -> str:
        return f"queue {self.name} ({'paused' if self.paused_at else 'running'})"


class RateWindow(models.Model):
    """One shard of the recent starts of a rate-limited kind, counted per bucket of database time.

    A bucket is a twentieth of the limit's window, numbered from the epoch. A claim locks one
    shard, sums the buckets that overlap the window ending now (a partial bucket counts whole,
    so the sum never undercounts), takes at most the room the shard's share of N leaves, and
    adds its own starts. The shares add up to N, so any window of the limit's length holds at
    most N starts; with several shards (up to 8), concurrent claimers lock different rows
    instead of queueing behind one.
    """

    kind = models.CharField(max_length=200)
    shard = models.PositiveSmallIntegerField(default=0)
    buckets = BigIntegerArrayField(default=list)
    counts = IntegerArrayField(default=list)

    objects = QueueManager["RateWindow"]()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "shard"], name="reliableq_ratewindow_kind_shard")]

    def __str__(self) -> str:
        return f"rate window of {self.kind}, shard {self.shard}"


class Worker(models.Model):
    """A worker process as its heartbeat last reported it: what it serves and how busy it is.

    Upserted at start and at every beat (a third of its lease); live while it was seen within its
    lease. The maintenance leader deletes the rows of workers gone for a day.
    """

    id = models.CharField(max_length=200, primary_key=True)  # the worker id (host:pid unless --worker-id)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField()
    busy = models.PositiveIntegerField(default=0)  # slots in use at the last beat
    isolation = models.CharField(max_length=16, blank=True, default="")  # thread, process, async, or "per handler"
    version = models.CharField(max_length=40, blank=True, default="")
    lease_seconds = models.FloatField()
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)  # a clean exit

    objects = QueueManager["Worker"]()

    class Meta:
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return f"worker {self.id}"


class Leader(models.Model):
    """Who holds a fleet-wide duty (the maintenance of the queue) until when, under which token.

    One row per duty. A worker holds it by renewing before `expires_at`; when it stops renewing
    (it died, it was paused), any worker may take it over with a new token, so a late renewal
    by the old holder finds the token changed and changes nothing (reliableq.queue.leadership).
    """

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200)  # the worker id
    token = models.UUIDField()
    expires_at = models.DateTimeField()

    objects = QueueManager["Leader"]()

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder} until {self.expires_at}"


class CatchUp(models.TextChoices):
    LATEST = "latest"  # one job for the newest slot missed while no worker ran
    ALL = "all"  # one job per missed slot, oldest first (the newest 1,000 at most)
    NONE = "none"  # no job for a missed slot


class Overlap(models.TextChoices):
    ALLOW = "allow"  # every slot makes its job, whatever the previous one is doing
    SKIP = "skip"  # no job for a slot while the schedule's previous job is PENDING or RUNNING


class Schedule(models.Model):
    """A periodic job: each slot of `cron` in `timezone` makes one job of `kind`, fleet-wide.

    Declared in code (reliableq.schedule, @handler(cron=...); `from_code`, written when a worker
    starts) or made by an operator in the admin. `next_slot` is the earliest slot not yet made (NULL
    while disabled); the maintenance leader makes the jobs of the slots that come due and moves it
    on (reliableq.scheduler). `last_job` is a plain id, not a foreign key: retention prunes jobs.
    """

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=200)
    cron = models.CharField(max_length=200, help_text="Five fields, or six with seconds first.")
    payload = models.JSONField(default=dict, blank=True)
    timezone = models.CharField(max_length=64, default="UTC", help_text="An IANA name, like Europe/Paris.")
    enabled = models.BooleanField(default=True)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    overlap = models.CharField(max_length=8, choices=Overlap.choices, default=Overlap.ALLOW)
    queue = models.CharField(max_length=100, default="default")
    priority = models.IntegerField(default=0, help_text="Lower runs first.")
    from_code = models.BooleanField("declared in code", default=False, editable=False)
    last_slot = models.DateTimeField(null=True, blank=True, editable=False)
    last_job = models.UUIDField(null=True, blank=True, editable=False)
    next_slot = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    updated_at = models.DateTimeField(db_default=Now(), editable=False)

    objects = QueueManager["Schedule"]()

    class Meta:
        ordering = ["name"]
        indexes = [
            # The leader's round: enabled schedules by their next slot (the due ones, and the earliest).
            models.Index(fields=["next_slot"], condition=Q(enabled=True), name="reliableq_schedule_due"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(catch_up__in=CatchUp.values), name="reliableq_schedule_catch_up_valid"),
            models.CheckConstraint(condition=Q(overlap__in=Overlap.values), name="reliableq_schedule_overlap_valid"),
        ]

    def __str__(self) -> str:
        return f"schedule {self.name} ({self.cron} {self.timezone})"
