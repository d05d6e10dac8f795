"""CPU seconds spent by server processes, read from /proc (Linux): a cost per request that a
shared machine's stolen or contended time moves far less than it moves requests per second.

`Meter(roots)` counts the processes descending from `roots` (a gunicorn master and its workers)
and every process named `postgres` or `pgbouncer` on the machine (the database side of the same
requests; idle servers add next to nothing). A process that exits between two readings takes its
CPU with it, so readings are taken around runs whose processes live on (persistent connections).
"""

from __future__ import annotations

import os
from pathlib import Path

DATABASE_PROCESSES = frozenset({"postgres", "pgbouncer"})
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(raw: str) -> tuple[str, int, float]:
    """(name, parent pid, user + system CPU seconds) from the text of /proc/<pid>/stat."""
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (OSError once it is gone)."""
    return _stat(Path(f"/proc/{pid}/stat").read_text())[2]


def _processes() -> dict[int, tuple[str, int, float]]:
    """pid -> (name, parent pid, user + system CPU seconds) of every process readable now."""
    found: dict[int, tuple[str, int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found[int(entry.name)] = _stat((entry / "stat").read_text())
        except OSError:  # gone, or not ours to read
            continue
    return found


class Meter:
    def __init__(self, roots: list[int]) -> None:
        self.roots = set(roots)

    def read(self) -> tuple[float, float]:
        """CPU seconds used so far by the roots' process trees, and by the database processes."""
        procs = _processes()
        app = database = 0.0
        for pid, (name, _, cpu) in procs.items():
            if name in DATABASE_PROCESSES:
                database += cpu
            elif self._under_roots(pid, procs):
                app += cpu
        return app, database

    def _under_roots(self, pid: int, procs: dict[int, tuple[str, int, float]]) -> bool:
        seen = 0
        while pid in procs and seen < 64:
            if pid in self.roots:
                return True
            pid = procs[pid][1]
            seen += 1
        return False


def available() -> bool:
    return Path("/proc/self/stat").exists()
