"""Django Tasks, written as a user writes them, run by reliableq.backends.ReliableQBackend."""

from __future__ import annotations

import asyncio

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="reports", priority=10)
def report(name: str) -> dict[str, str]:
    return {"report": name}


@task()
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def which_attempt(context: object) -> int:
    return context.attempt  # type: ignore[attr-defined]


@task()
async def async_double(n: int) -> int:
    await asyncio.sleep(0)
    return n * 2


@task(takes_context=True)
def fails_once(context: object) -> str:
    if context.attempt == 1:  # type: ignore[attr-defined]
        raise ValueError("the first attempt fails")
    return "second time lucky"


@task()
def exits(code: int) -> None:
    raise SystemExit(code)
