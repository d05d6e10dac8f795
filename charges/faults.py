"""The charge service's fault knob: slow, 503, or commit-then-no-answer. Inert unless FAULT_INJECTION."""

from __future__ import annotations

import random
import socket
import time
from typing import Any, cast

from reliableq.conf import reliableq_settings

from .models import ServiceFault

_rng = random.SystemRandom()


def current() -> ServiceFault | None:
    """The knob's settings, or None when fault injection is off (the default)."""
    if not reliableq_settings.FAULT_INJECTION:
        return None
    return cast("ServiceFault | None", ServiceFault.objects.filter(pk=1).first())


def roll(rate: float) -> bool:
    return rate > 0 and _rng.random() < rate


def delay(knob: ServiceFault | None) -> None:
    if knob is not None and knob.delay_seconds > 0:
        time.sleep(knob.delay_seconds)


def drop_connection(request: Any) -> bool:
    """Close the client's socket so that it gets no answer at all. True if that was possible."""
    sock = request.META.get("gunicorn.socket")
    if sock is None:
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    return True


def set_knob(*, delay_seconds: float = 0.0, unavailable_rate: float = 0.0, no_answer_rate: float = 0.0) -> None:
    ServiceFault.objects.update_or_create(
        pk=1,
        defaults={
            "delay_seconds": delay_seconds,
            "unavailable_rate": unavailable_rate,
            "no_answer_rate": no_answer_rate,
        },
    )
