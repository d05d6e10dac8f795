"""CPU seconds spent by server processes, read from /proc (Linux): a cost per request that a
shared machine's stolen or contended time moves far less than it moves requests per second.

`Meter(roots)` counts the processes descending from `roots` (a gunicorn master and its workers)
and every process named `postgres` or `pgbouncer` on the machine (the database side of the same
requests; idle servers add next to nothing). A process that ends between two readings is gone
from /proc, but its parent, once it has reaped it, carries its CPU in its reaped-children time
(fields cutime and cstime): the readings add that time for every process they count, so an
autovacuum worker or a backend that ends inside a run, or a gunicorn worker that is replaced, still
counts. Lost, still: a process reaped by a parent outside the counted set, and one that ended
unreaped (a zombie's own time is read while it lasts).
"""

from __future__ import annotations

import os
from pathlib import Path

DATABASE_PROCESSES = frozenset({"postgres", "pgbouncer"})
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(raw: str) -> tuple[str, int, float, float]:
    """(name, parent pid, own CPU seconds, reaped children's CPU seconds) from /proc/<pid>/stat's text.

    Own: utime + stime. Reaped children's: cutime + cstime, the time of the children (and their
    reaped descendants) the process has waited for.
    """
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    return (
        name,
        int(fields[1]),
        (int(fields[11]) + int(fields[12])) / _TICK,
        (int(fields[13]) + int(fields[14])) / _TICK,
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process itself has used so far (OSError once it is gone)."""
    return _stat(Path(f"/proc/{pid}/stat").read_text())[2]


def _processes() -> dict[int, tuple[str, int, float, float]]:
    """pid -> (name, parent pid, own CPU seconds, reaped children's CPU seconds) of every process readable now."""
    found: dict[int, tuple[str, int, float, float]] = {}
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
        """CPU seconds used so far by the roots' process trees, and by the database processes, each
        with the time of the children they have reaped."""
        procs = _processes()
        app = database = 0.0
        for pid, (name, _, own, reaped) in procs.items():
            if name in DATABASE_PROCESSES:
                database += own + reaped
            elif self._under_roots(pid, procs):
                app += own + reaped
        return app, database

    def _under_roots(self, pid: int, procs: dict[int, tuple[str, int, float, float]]) -> bool:
        seen = 0
        while pid in procs and seen < 64:
            if pid in self.roots:
                return True
            pid = procs[pid][1]
            seen += 1
        return False


def available() -> bool:
    return Path("/proc/self/stat").exists()
