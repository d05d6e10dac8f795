"""A file whose modification time says the worker's loop is turning: for liveness probes.

`runworker --health-file PATH` touches PATH after every pass of the loop that raised no database
error, at most once a second. A pass comes at least every POLL_SECONDS, idle or busy (a full
pool still wakes to collect, write and keep the maintenance lease), so a probe that finds the
file older than a minute has found a loop that is stuck, or a database that has failed every pass
for that long. The worker never reads the file; a supervisor does, e.g.
`test $(($(date +%s) - $(stat -c %Y PATH))) -lt 60`.
"""

from __future__ import annotations

from pathlib import Path

EVERY_SECONDS = 1.0


class AliveFile:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._next = 0.0
        self._failed = False

    def fail(self) -> None:
        """The worker is unhealthy (stuck handlers): remove the file and never touch it again."""
        self._failed = True
        if self.path is not None:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass

    def touch(self, now: float) -> None:
        """Mark the loop alive at monotonic time `now` (at most once per EVERY_SECONDS; no path, nothing)."""
        if self.path is None or self._failed or now < self._next:
            return
        self._next = now + EVERY_SECONDS
        try:
            self.path.touch()  # creates it, or sets its times to now
        except OSError:
            # A probe that finds no fresh file restarts the worker: the right outcome for a full or
            # read-only disk too. Nothing here may stop the loop itself.
            pass
