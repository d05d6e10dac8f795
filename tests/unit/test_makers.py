"""maker(cls): the per-job records made without their frozen __init__, equal to what __init__ makes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest

from reliableq.queue import ClaimedJob, Finish
from reliableq.queue.makers import maker
from reliableq.worker.executor import Result


def every_field(cls: type) -> dict[str, Any]:
    """A distinct, non-default value for every field of cls."""
    values: dict[str, Any] = {}
    for n, f in enumerate(dataclasses.fields(cls)):
        values[f.name] = {"n": n, "field": f.name}  # unequal to any default, and to each other
    return values


@pytest.mark.parametrize("cls", [ClaimedJob, Finish, Result])
def test_every_field_given_makes_an_object_equal_field_by_field(cls: type) -> None:
    values = every_field(cls)
    made, built = maker(cls)(**values), cls(**values)
    assert type(made) is cls
    for f in dataclasses.fields(cls):
        assert getattr(made, f.name) is values[f.name], f.name
        assert getattr(made, f.name) == getattr(built, f.name), f.name


@pytest.mark.parametrize("cls", [ClaimedJob, Finish])
def test_omitted_fields_take_the_same_defaults_and_a_fresh_default_factory_value(cls: type) -> None:
    required = {f.name: object() for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}  # fmt: skip
    made, built = maker(cls)(**required), cls(**required)
    for f in dataclasses.fields(cls):
        assert getattr(made, f.name) == getattr(built, f.name), f.name
    if cls is ClaimedJob:
        assert made.upstream == {} and made.upstream is not maker(cls)(**required).upstream


def test_a_made_claimed_job_is_frozen_and_works_as_a_handler_sees_it() -> None:
    job = maker(ClaimedJob)(
        id=uuid.uuid4(), kind="k", queue="q", priority=0, payload={"a": 1}, attempt=1, max_attempts=3,
        lease_token=uuid.uuid4(), worker_id="w", run_at=dt.datetime.now(dt.timezone.utc),
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.kind = "other"  # type: ignore[misc]
    assert not job.cancel_requested
    job.cancel.set()
    assert job.cancel_requested
    job.progress(1, 2)
    assert job.idempotency_key == f"reliableq:k:{job.id}"
    assert repr(job).startswith("ClaimedJob(id=")


def test_missing_and_unknown_arguments_are_refused_as_the_class_refuses_them() -> None:
    make = maker(Finish)
    with pytest.raises(TypeError):
        make(job_id=uuid.uuid4())  # lease_token, status and outcome missing
    with pytest.raises(TypeError):
        make(job_id=1, lease_token=2, status="S", outcome="S", colour="red")
    with pytest.raises(TypeError):
        make(1, 2, "S", "S")  # keyword only, as the class


def test_a_class_it_cannot_make_is_refused() -> None:
    @dataclasses.dataclass
    class Plain:  # no slots
        a: int

    @dataclasses.dataclass(slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            raise ValueError

    @dataclasses.dataclass(slots=True)
    class Shadowing:
        obj: int

    for cls in (Plain, Checked, Shadowing):
        with pytest.raises(TypeError):
            maker(cls)


@pytest.mark.parametrize("name", ["_new", "_cls", "_missing", "_set0", "_set1", "_default1", "_factory1"])
def test_a_field_named_like_the_generated_codes_own_names_is_refused(name: str) -> None:
    # Each would be a parameter of make() hiding what its body calls (the slot setter of field 0,
    # the default of field 1, ...), and make would then build a wrong object without a word.
    cls = dataclasses.make_dataclass(
        "Clash", [(name, int), ("b", int, dataclasses.field(default_factory=int))], slots=True, frozen=True
    )
    other = dataclasses.make_dataclass(
        "Clash", [(name, int, dataclasses.field(default=0)), ("b", int, dataclasses.field(default=1))], slots=True
    )
    with pytest.raises(TypeError, match="would shadow"):
        maker(cls if name != "_default1" else other)
