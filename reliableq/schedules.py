"""Schedules: what a valid one is, those code declares, and the changes the admin and the commands
make (save, enable, disable, run now). The leader's round that makes their jobs is reliableq.scheduler.

Code declares schedules in a jobs.py (reliableq.schedule, and @handler(cron=...) as a schedule
named after its kind); every worker writes them to their rows when it starts (sync), and deletes
the rows of code schedules its code no longer declares. An operator's `enabled` survives a sync.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any, cast

from django.db.models import OuterRef, QuerySet, Subquery

from . import audit, registry, rules, services
from .cron import check as cron_expression
from .cron import next_slot, zone
from .errors import InvalidJob, UnknownKind, WrongStatus
from .models import Attempt, CatchUp, Job, JobStatus, Overlap, Schedule
from .options import JobOptions
from .queue import db
from .queue import schedules as statements
from .scheduler import overlap_key

logger = logging.getLogger("reliableq.scheduler")
RESERVED = ("scheduled_for", "schedule")  # merged into each job's payload by the schedule
ENABLED, DISABLED = "Enabled the schedule.", "Disabled the schedule."


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """A schedule as declared or edited: what `check` accepted."""

    name: str
    kind: str
    cron: str
    payload: dict[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    catch_up: str = str(CatchUp.LATEST)
    overlap: str = str(Overlap.ALLOW)
    queue: str = "default"
    priority: int = 0


_declared: dict[str, ScheduleSpec] = {}


def schedule(
    name: str,
    *,
    cron: str,
    kind: str | None = None,
    payload: dict[str, Any] | None = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    overlap: str = "allow",
    queue: str = "default",
    priority: int = 0,
) -> ScheduleSpec:
    """Declare a schedule in code (a jobs.py): each slot of `cron` in `timezone` makes a job of
    `kind` (default: `name`) with `payload`. Workers write it to its row when they start.

    InvalidJob, naming the field, for a bad value; a kind no handler registers is a system check
    error (reliableq.E010), since another app's jobs.py may register it later.
    """
    spec = check(
        name=name, kind=name if kind is None else kind, cron=cron, payload=payload, timezone=timezone,
        catch_up=catch_up, overlap=overlap, queue=queue, priority=priority, registered=False,
    )  # fmt: skip
    found = _declared.get(name)
    if found is not None and found != spec:
        raise InvalidJob(f"Schedule {name!r} is declared twice, differently.", field="name")
    _declared[name] = spec
    return spec


def declared() -> dict[str, ScheduleSpec]:
    """Every schedule code declares, by name: reliableq.schedule's, then each cron handler's."""
    specs = dict(_declared)
    for kind, expression in registry.crons().items():
        specs.setdefault(kind, ScheduleSpec(name=kind, kind=kind, cron=expression))
    return specs


def conflicts() -> list[str]:
    """Names that reliableq.schedule and a cron handler both declare (a system check error)."""
    return sorted(set(_declared) & set(registry.crons()))


def check_name(value: Any, *, field: str = "name") -> str:
    return rules.label(value, field=field, what="A schedule's name")


def check(
    *,
    name: Any,
    kind: Any,
    cron: Any,
    payload: Any = None,
    timezone: Any = "UTC",
    catch_up: Any = "latest",
    overlap: Any = "allow",
    queue: Any = "default",
    priority: Any = 0,
    registered: bool = True,
) -> ScheduleSpec:
    """The schedule these values make, or InvalidJob naming the first field that breaks a rule.
    With `registered`, its kind must have a handler in this process (UnknownKind's hint included)."""
    check_name(name)
    _check_kind(kind, registered=registered)
    expression = _field("cron", cron_expression, cron)
    _field("timezone", zone, timezone)
    if catch_up not in CatchUp.values:
        raise InvalidJob(f"catch_up must be one of {', '.join(CatchUp.values)} (got {catch_up!r}).", field="catch_up")
    if overlap not in Overlap.values:
        raise InvalidJob(f"overlap must be one of {', '.join(Overlap.values)} (got {overlap!r}).", field="overlap")
    rules.queue_name(queue)
    rules.priority(priority)
    payload = {} if payload is None else payload
    encoded = rules.payload(payload)
    taken = [k for k in RESERVED if k in payload]  # a dict: rules.payload said so
    if taken:
        raise InvalidJob(
            f"The payload cannot hold {', '.join(taken)}: each job's payload gets them from its schedule.",
            field="payload",
        )
    # With the slot and the name merged in, as each job will carry it: too large is refused now, not at 3 a.m.
    rules.payload({**payload, "scheduled_for": "2000-01-01T00:00:00+00:00", "schedule": name})
    return ScheduleSpec(
        name=name, kind=kind, cron=expression, payload=json.loads(encoded), timezone=timezone,
        catch_up=str(catch_up), overlap=str(overlap), queue=queue, priority=priority,
    )  # fmt: skip


def _field(name: str, checker: Any, value: Any) -> str:
    """checker(value) as text, its ValueError an InvalidJob naming the field."""
    try:
        return str(checker(value))
    except ValueError as exc:
        raise InvalidJob(str(exc), field=name) from None


def _check_kind(kind: Any, *, registered: bool) -> None:
    rules.label(kind, field="kind", what="A kind")
    if registry.is_task_kind(kind):  # a task's payload is the backend's own: a schedule cannot make one
        raise InvalidJob(f"Kind {kind!r} runs Django Tasks, which a schedule cannot make.", field="kind")
    if registered:
        try:
            registry.get(kind)
        except UnknownKind as exc:
            raise InvalidJob(str(exc), field="kind") from None


# -- rows --------------------------------------------------------------------------------------


def first_slot(spec: ScheduleSpec | Schedule, now: dt.datetime) -> dt.datetime | None:
    """The schedule's first slot after `now` (None if it never fires again)."""
    try:
        return next_slot(spec.cron, now, zone(spec.timezone))
    except ValueError:
        return None


def sync() -> tuple[list[str], list[str], list[str]]:
    """Write the schedules code declares to their rows; delete the code rows no longer declared.
    Returns the names (created, updated, deleted). Every worker calls it when it starts."""
    now = statements.database_now()
    rows = [
        statements.Declared(
            name=s.name, kind=s.kind, cron=s.cron, payload=json.dumps(s.payload), timezone=s.timezone,
            catch_up=s.catch_up, overlap=s.overlap, queue=s.queue, priority=s.priority, next_slot=first_slot(s, now),
        )
        for s in declared().values()
    ]  # fmt: skip
    created, updated, deleted = statements.sync(rows)
    if created or updated:
        logger.info("schedules declared in code: %s created, %s updated", len(created), len(updated))
    if deleted:
        logger.info("schedules no longer declared in code, deleted: %s", ", ".join(deleted))
    return created, updated, deleted


EDITABLE = ("name", "kind", "cron", "payload", "timezone", "enabled", "catch_up", "overlap", "queue", "priority")


def save(schedule: Schedule, *, changed: frozenset[str] | None = None) -> Schedule:
    """Store an operator's schedule (a new one, or `changed` fields of an existing one) after `check`.

    Only the editable fields are written, so a round's progress made meanwhile is kept; a new cron,
    time zone or a re-enabled schedule starts from its next slot after now, a disabled one has none.
    Fields of a schedule declared in code come from the code: only `enabled` changes here.
    """
    spec = check(
        name=schedule.name, kind=schedule.kind, cron=schedule.cron, payload=schedule.payload,
        timezone=schedule.timezone, catch_up=schedule.catch_up, overlap=schedule.overlap, queue=schedule.queue,
        priority=schedule.priority,
    )  # fmt: skip
    now = statements.database_now()
    if schedule.pk is None:
        schedule.payload = spec.payload
        schedule.from_code = False
        schedule.next_slot = first_slot(spec, now) if schedule.enabled else None
        schedule.save(using=db.alias(), force_insert=True)
        schedule.refresh_from_db()
        return schedule
    fields = set(EDITABLE if changed is None else changed) & set(EDITABLE)
    if schedule.from_code and fields - {"enabled"}:
        raise InvalidJob(
            f"Schedule {schedule.name!r} is declared in code: change it there (only enabled changes here).",
            field=sorted(fields - {"enabled"})[0],
        )
    values: dict[str, Any] = {name: getattr(schedule, name) for name in fields}
    if not schedule.enabled:
        values["next_slot"] = None
    elif fields & {"cron", "timezone", "enabled"}:
        values["next_slot"] = first_slot(spec, now)
    with db.atomic():
        Schedule.objects.filter(pk=schedule.pk).update(**values, updated_at=now)
    schedule.refresh_from_db()
    return schedule


def _named(name: str) -> Schedule:
    found: Schedule | None = Schedule.objects.filter(name=name).first()
    if found is None:
        raise Schedule.DoesNotExist(f"No schedule named {name!r}.")
    return found


def set_enabled(name: str, enabled: bool, *, by: Any = None) -> Schedule:
    """Enable (from its next slot after now: slots passed while disabled make no job) or disable a
    schedule (no job for any slot from now on). Audited when `by` is a user."""
    schedule = _named(name)
    if schedule.enabled == enabled:
        return schedule
    with db.atomic():
        now = statements.database_now()
        schedule.enabled = enabled
        upcoming = first_slot(schedule, now) if enabled else None
        Schedule.objects.filter(pk=schedule.pk, enabled=not enabled).update(
            enabled=enabled, next_slot=upcoming, updated_at=now
        )
        if by is not None:
            audit.record(by, schedule, ENABLED if enabled else DISABLED)
    schedule.refresh_from_db()
    return schedule


def run_now(name: str, *, by: Any = None) -> Job:
    """Make one job of the schedule at once (not a slot: its payload's scheduled_for is now).

    Under overlap="skip", WrongStatus while the schedule's previous job is PENDING or RUNNING.
    Audited when `by` is a user.
    """
    schedule = _named(name)
    tz = zone(schedule.timezone)
    with db.atomic():
        now = statements.database_now()
        payload = {**schedule.payload, "scheduled_for": now.astimezone(tz).isoformat(), "schedule": schedule.name}
        skip = schedule.overlap == Overlap.SKIP
        options = JobOptions(
            queue=schedule.queue, priority=schedule.priority, unique_key=overlap_key(schedule.name) if skip else None
        )
        job, new = services.submit(schedule.kind, payload, options)
        if not new:
            raise WrongStatus(
                job,
                "finished",
                f"Schedule {schedule.name!r} does not allow overlap and its job {job.id} is still {job.status}: "
                "no job made.",
            )
        if by is not None:
            audit.record(by, schedule, f"Ran now: job {job.id}.")
    return job


def with_last_status() -> QuerySet[Schedule]:
    """Schedules with `last_status`: the status of their last slot's job (None once retention pruned it)."""
    status = Job.objects.filter(pk=OuterRef("last_job")).values("status")[:1]
    return cast("QuerySet[Schedule]", Schedule.objects.annotate(last_status=Subquery(status)))


FAILED_SHOWN = 20  # the dashboard's list


def failed() -> list[Schedule]:
    """Schedules whose last slot's job is DEAD (the dashboard's list), by name."""
    dead = with_last_status().filter(**{"last_status": JobStatus.DEAD})  # an annotation: the plugin cannot see it
    return list(dead.order_by("name")[:FAILED_SHOWN])


def page(*, after: str = "", limit: int = 100) -> tuple[list[Schedule], str | None]:
    """Schedules by name after `after`, `limit` of them, and the name to list the next page after (None: the last)."""
    found = list(Schedule.objects.filter(name__gt=after).order_by("name")[: limit + 1])
    return found[:limit], found[limit - 1].name if len(found) > limit else None


@dataclass(frozen=True, slots=True)
class Health:
    name: str
    lag_seconds: float | None  # now minus its last slot's job start (the slot itself until the job starts)
    last_failed: bool  # its last slot's job is DEAD


def health(*, limit: int) -> tuple[list[Health], bool]:
    """The enabled schedules' lag and last failure, the first `limit` by name; and whether more exist."""
    started = Attempt.objects.filter(job_id=OuterRef("last_job"), number=1).values("started_at")[:1]
    found = list(
        with_last_status()
        .filter(enabled=True)
        .annotate(last_started=Subquery(started))
        .order_by("name")
        .values_list("name", "last_slot", "last_started", "last_status")[: limit + 1]
    )
    now = statements.database_now()
    figures = [
        Health(
            name,
            None if slot is None else max(0.0, (now - (began or slot)).total_seconds()),
            status == JobStatus.DEAD,
        )
        for name, slot, began, status in found[:limit]
    ]
    return figures, len(found) > limit
