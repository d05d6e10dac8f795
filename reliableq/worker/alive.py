"""A file whose modification time says the worker's loop is turning: for liveness probes.

`runworker --health-file PATH` touches PATH after every pass of the loop that raised no database
error, at most once a second. A pass comes at least every POLL_SECONDS, idle or busy (a full
pool still wakes to collect, write and keep the maintenance lease), so a probe that finds the
file older than a minute has found a loop that is stuck, or a database that has failed every pass
for that long with an error other than being away. While the database is away (down, failing
over, read-only) the loop waits for it and keeps touching the file, which then holds one line,
`reconnecting since <UTC time> (<parts>): <error>`, and is empty again once every part is back:
a restart would not bring the database back sooner. The worker never reads the file; a
supervisor does, e.g. `test $(($(date +%s) - $(stat -c %Y PATH))) -lt 60`.
"""

from __future__ import annotations

from pathlib import Path

EVERY_SECONDS = 1.0


class AliveFile:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._next = 0.0
        self._failed = False
        self._state: str | None = None  # what the file says: None (empty) when the database answers

    def fail(self) -> None:
        """The worker is unhealthy (stuck handlers): remove the file and never touch it again."""
        self._failed = True
        if self.path is not None:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass

    def touch(self, now: float, state: str | None = None) -> None:
        """Mark the loop alive at monotonic time `now` (at most once per EVERY_SECONDS, or when `state`,
        the line the file holds while the database is away, changes; no path, nothing)."""
        if self.path is None or self._failed or (now < self._next and state == self._state):
            return
        self._next = now + EVERY_SECONDS
        try:
            if state != self._state:
                self.path.write_text(f"{state}\n" if state else "")
                self._state = state
            else:
                self.path.touch()  # creates it, or sets its times to now
        except OSError:
            # A probe that finds no fresh file restarts the worker: the right outcome for a full or
            # read-only disk too. Nothing here may stop the loop itself.
            pass
