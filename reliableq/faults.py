"""Named crash points for the failure windows, inert unless FAULT_INJECTION is on."""

from __future__ import annotations

import logging
import os
import random
import signal
import threading

from .conf import reliableq_settings

logger = logging.getLogger("reliableq.faults")

ATTEMPT_POINTS = ("after_claim_before_effect", "after_effect_before_finalize", "during_finalize")
# A job's steps (job.step): before its function runs, after it returned and before its record
# commits, after the record committed.
STEP_POINTS = ("before_step", "after_step_before_record", "after_step_record")
POINTS = (*ATTEMPT_POINTS, *STEP_POINTS)

_lock = threading.Lock()
_rng: random.Random | None = None


def _random() -> random.Random:
    global _rng
    if _rng is None:
        seed = os.environ.get("RELIABLEQ_CRASH_SEED")
        _rng = random.Random(seed)
    return _rng


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL if the environment asks for a crash here."""
    if name not in POINTS:
        raise ValueError(f"Unknown crash point {name!r}; expected one of {', '.join(POINTS)}.")
    if not reliableq_settings.FAULT_INJECTION:
        return
    if os.environ.get("RELIABLEQ_CRASH_AT") != name:
        return
    rate = float(os.environ.get("RELIABLEQ_CRASH_RATE", "1"))
    with _lock:
        hit = _random().random() < rate
    if hit:
        logger.warning("fault injection: SIGKILL at %s (pid %s)", name, os.getpid())
        for h in logging.getLogger().handlers + logging.getLogger("reliableq").handlers:
            h.flush()
        os.kill(os.getpid(), signal.SIGKILL)
