"""A job's enqueue options, in one place: what enqueue, enqueue_on_commit, enqueue_many, submit,
submit_many and the API's parser all take."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any, TypedDict


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """How a job is to be stored and claimed; checked by the rules when it is submitted (InvalidJob)."""

    queue: str = "default"
    priority: int = 0  # lower runs first, -1000..1000 (0..1000 over HTTP)
    run_at: dt.datetime | None = None  # due now when None
    max_attempts: int | None = None  # the handler's, else RELIABLEQ["MAX_ATTEMPTS"], when None
    dedupe_key: str | None = None  # unique forever, per submitter (an Idempotency-Key)
    concurrency_key: str | None = None  # with the handler's max_running_per_key
    unique_key: str | None = None  # at most one PENDING or RUNNING job per (kind, unique_key)
    fair_key: str | None = None  # with the handler's fair=True: claims rotate among these keys
    debounce: float | None = None  # seconds; with unique_key: a PENDING job's payload replaced, its start moved
    debounce_max: float | None = None  # seconds after the job's first enqueue that debounce cannot pass

    @classmethod
    def of(cls, options: dict[str, Any], *, refused: tuple[str, ...] = (), where: str = "enqueue") -> JobOptions:
        """JobOptions from keyword arguments, naming any that is not an option (a TypeError, as Python's own)."""
        if options.keys() <= _NAMES and not options.keys() & set(refused):
            return cls(**options)
        unknown = sorted(set(options) - _NAMES) + sorted(set(options) & set(refused))
        if unknown:
            allowed = ", ".join(f.name for f in dataclasses.fields(cls) if f.name not in refused)
            raise TypeError(f"{where}() got unexpected option(s) {', '.join(unknown)}; its options are {allowed}.")
        return cls(**options)


_NAMES = frozenset(f.name for f in dataclasses.fields(JobOptions))  # read once, not at every enqueue


class EnqueueOptions(TypedDict, total=False):
    """The keyword arguments of reliableq.enqueue: JobOptions' fields, for type checkers."""

    queue: str
    priority: int
    run_at: dt.datetime | None
    max_attempts: int | None
    dedupe_key: str | None
    concurrency_key: str | None
    unique_key: str | None
    fair_key: str | None
    debounce: float | None
    debounce_max: float | None


class ManyOptions(TypedDict, total=False):
    """The keyword arguments of reliableq.enqueue_many: every option but the keys of one job."""

    queue: str
    priority: int
    run_at: dt.datetime | None
    max_attempts: int | None
    concurrency_key: str | None
    fair_key: str | None


# A batch of one kind cannot honour these per row.
PER_JOB = ("dedupe_key", "unique_key", "debounce", "debounce_max")
