"""A module that leaves a mark when imported: a worker must never import it because a payload named it."""

import os
from pathlib import Path

_mark = os.environ.get("SECURITY_CANARY_FILE")
if _mark:
    Path(_mark).write_text("imported\n")


def task() -> None:
    """What a payload would ask a worker to run."""
