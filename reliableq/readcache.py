"""The operators' expensive reads (metrics, the dashboard), computed at most once per STATS_CACHE_SECONDS.

A scrape of /v1/metrics or a dashboard page reads every attempt row, or the last hour's: at a few
hundred thousand jobs that is a second of the database's time. Anyone who may read them could ask
for them in a loop, so each process computes each read at most once per interval and hands the
same answer to every caller in it meanwhile (one computes, the others wait for its answer: no
stampede when the interval ends). The figures are then up to that many seconds old.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.core.signals import setting_changed
from django.dispatch import receiver

from .conf import reliableq_settings

T = TypeVar("T")

_lock = threading.Lock()
_locks: dict[str, threading.Lock] = {}
_answers: dict[str, tuple[float, Any]] = {}


def read(name: str, compute: Callable[[], T]) -> T:
    """`compute()`'s answer, computed again only once the last one is STATS_CACHE_SECONDS old."""
    seconds = float(reliableq_settings.STATS_CACHE_SECONDS)
    if seconds <= 0:
        return compute()
    with _lock:
        lock = _locks.setdefault(name, threading.Lock())
    with lock:
        found = _answers.get(name)
        if found is not None and time.monotonic() - found[0] < seconds:
            return cast(T, found[1])
        value = compute()
        _answers[name] = (time.monotonic(), value)
        return value


def clear() -> None:
    _answers.clear()


@receiver(setting_changed)
def _clear(*, setting: str, **kwargs: Any) -> None:
    if setting == "RELIABLEQ":
        clear()
