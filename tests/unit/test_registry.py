"""The handler registry: one function per kind, validated options, discovery of jobs.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import reliableq
from reliableq import registry
from reliableq.errors import UnknownKind


@pytest.fixture(autouse=True)
def isolated_registry() -> Iterator[None]:
    """Kinds registered by a test vanish after it; testproject's kinds stay."""
    saved = dict(registry._handlers)
    yield
    registry._handlers.clear()
    registry._handlers.update(saved)


def first(job: object) -> None: ...


def second(job: object) -> None: ...


def test_handler_registers_the_function_with_its_options() -> None:
    returned = reliableq.handler("unit.options", max_attempts=7, timeout=2.5, max_running=3, cron="*/5 * * * *")(first)
    assert returned is first  # the decorator leaves the function usable
    h = registry.get("unit.options")
    assert (h.kind, h.func, h.max_attempts, h.timeout, h.max_running, h.cron) == (
        "unit.options",
        first,
        7,
        2.5,
        3,
        "*/5 * * * *",
    )
    assert "unit.options" in registry.kinds()


def test_duplicate_kind_with_another_function_is_refused() -> None:
    registry.handler("unit.dup")(first)
    with pytest.raises(ValueError, match=r"'unit.dup' already has a handler: .*test_registry\.first"):
        registry.handler("unit.dup")(second)
    assert registry.get("unit.dup").func is first


def test_duplicate_of_a_discovered_kind_is_refused() -> None:
    with pytest.raises(ValueError, match=r"already has a handler: testproject\.jobs\.noop"):
        registry.handler("demo.noop")(second)


def test_registering_the_same_function_again_is_allowed() -> None:
    # A module imported twice (autodiscover after an explicit import) must not fail.
    registry.handler("unit.same")(first)
    registry.handler("unit.same", max_attempts=2)(first)
    assert registry.get("unit.same").max_attempts == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": ""}, "non-empty string"),
        ({"kind": "k" * 201}, "at most 200"),
        ({"kind": "unit.bad", "max_attempts": 0}, "max_attempts must be at least 1"),
        ({"kind": "unit.bad", "max_attempts": -3}, "max_attempts must be at least 1"),
        ({"kind": "unit.bad", "timeout": 0}, "timeout must be a positive"),
        ({"kind": "unit.bad", "timeout": -1.5}, "timeout must be a positive"),
        ({"kind": "unit.bad", "max_running": 0}, "max_running must be at least 1"),
    ],
)
def test_bad_handler_arguments_are_refused(kwargs: dict, message: str) -> None:
    kind = kwargs.pop("kind")
    with pytest.raises(ValueError, match=message):
        registry.handler(kind, **kwargs)
    assert kind not in registry.kinds()


def test_unknown_kind_raises_unknown_kind_naming_it() -> None:
    with pytest.raises(UnknownKind, match=r"'no\.such\.kind'"):
        registry.get("no.such.kind")
    assert issubclass(reliableq.UnknownKind, LookupError)
    assert reliableq.UnknownKind is UnknownKind


def test_an_unknown_kind_says_where_handlers_are_found_and_which_modules_were_imported() -> None:
    # Issue 50: a handler in shop/handlers.py got a bare "No handler is registered" with no hint.
    with pytest.raises(UnknownKind) as caught:
        registry.get("shop.refund")
    message = str(caught.value)
    assert message.startswith("No handler is registered for kind 'shop.refund'. Handlers are found in each ")
    assert "installed app's jobs.py (imported here: reliableq.jobs, charges.jobs, testproject.jobs" in message
    assert "a handler in another module registers only once a jobs.py imports that module." in message


def test_the_workers_unknown_kind_error_has_the_same_hint_and_no_stray_period() -> None:
    import uuid

    from reliableq.queue import ClaimedJob
    from reliableq.worker import executor

    job = ClaimedJob(id=uuid.uuid4(), kind="shop.refund", queue="default", priority=0, payload={}, attempt=1,
                     max_attempts=5, lease_token=uuid.uuid4(), worker_id="vm:19602")  # fmt: skip
    error = executor.unknown_kind(job, registry.unknown(job.kind)).finish.error
    assert error.startswith("No handler is registered for kind 'shop.refund' on worker vm:19602. Handlers are ")
    assert "(imported here: reliableq.jobs, charges.jobs, testproject.jobs" in error and ".." not in error


def test_isolation_says_where_the_handlers_run_or_per_handler() -> None:
    # The workers panel showed "Isolation: thread" for a worker running isolation="process" handlers.
    assert registry.isolation() == "per handler"  # testproject: thread, async and process handlers
    registry._handlers.clear()
    reliableq.handler("unit.isolated", isolation="process")(first)
    assert registry.isolation() == "process"
    reliableq.handler("unit.threaded")(second)
    assert registry.isolation() == "per handler"


def test_testproject_kinds_are_discovered_at_startup() -> None:
    from testproject import jobs

    expected = {
        "demo.noop",
        "test.sleep",
        "test.flaky",
        "test.always_fails",
        "test.permanent",
        "test.poison",
        "test.stuck",
    }
    assert expected <= set(registry.kinds())
    assert registry.get("test.flaky").func is jobs.flaky
    assert registry.get("test.flaky").max_attempts == 5
    assert registry.get("test.stuck").timeout == 1
    assert registry.get("test.stuck").max_attempts == 2
    assert registry.get("demo.noop").max_attempts is None


def test_autodiscover_again_is_harmless() -> None:
    before = registry.kinds()
    registry.autodiscover()
    assert registry.kinds() == before
