"""Start Debian's PgBouncer in front of a PostgreSQL, in transaction mode, for the tests, the chaos
suite and the benchmarks: what a fleet usually runs behind.

    with PgBouncer.start(settings_dict, pool_size=4) as bouncer:
        bouncer.url          # postgres://postgres@127.0.0.1:<port>/<dbname>, through the pooler
        bouncer.server_connections()   # how many server connections it holds now
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from testproject import dburl
from testproject.processes import free_port

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# The login role PgBouncer's server connections use when started with server_user=SERVER_ROLE: the
# server can then count them (bench.serverconns) apart from every direct connection.
SERVER_ROLE = "rq_pooler"


def _owner(path: str) -> str:
    import pwd

    return pwd.getpwuid(os.stat(path).st_uid).pw_name


def available() -> bool:
    return os.access(BINARY, os.X_OK)


def ensure_server_role(url: str) -> None:
    """Create SERVER_ROLE on the server at `url` (a superuser, like the postgres role of direct clients)."""
    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [SERVER_ROLE]).fetchone():
            conn.execute(f"CREATE ROLE {SERVER_ROLE} LOGIN SUPERUSER")


@dataclass
class PgBouncer:
    process: subprocess.Popen[bytes]
    port: int
    dbname: str
    user: str
    folder: Path

    @classmethod
    def start(
        cls,
        database: dict[str, Any],
        *,
        pool_size: int = 4,
        max_client_conn: int = 500,
        server_user: str | None = None,
    ) -> PgBouncer:
        """PgBouncer on a free port, pooling every database of `database`'s server (a DATABASES entry).

        Clients log in as `database`'s user; the server connections log in as `server_user` (default:
        the same), so that a server can count the pooler's connections by role in pg_stat_activity.
        """
        if not available():
            raise FileNotFoundError("pgbouncer is not installed (apt-get install pgbouncer)")
        folder = Path(tempfile.mkdtemp(prefix="rq-pgbouncer-"))
        folder.chmod(0o755)  # read by the unprivileged user PgBouncer switches to when started as root
        port = free_port()
        host = database.get("HOST") or "127.0.0.1"
        server = f"host={host}" + (f" port={database['PORT']}" if database.get("PORT") else "")
        user = database.get("USER") or "postgres"
        config = folder / "pgbouncer.ini"
        config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = {server} user={server_user or user}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {port}",
                    "unix_socket_dir =",
                    "auth_type = any",  # loopback only; the server behind it decides
                    "pool_mode = transaction",
                    f"default_pool_size = {pool_size}",
                    "min_pool_size = 0",
                    "reserve_pool_size = 0",
                    f"max_client_conn = {max_client_conn}",
                    "server_reset_query =",
                    "ignore_startup_parameters = extra_float_digits,options,application_name",
                    "log_connections = 0",
                    "log_disconnections = 0",
                    "admin_users = " + user,
                    "",
                ]
            )
        )
        config.chmod(0o644)
        argv = [BINARY, str(config)]
        if os.geteuid() == 0:
            # PgBouncer refuses to run as root. A socket directory is reachable by its owner (the
            # embedded server's user); a TCP server by anyone.
            owner = _owner(host) if host.startswith("/") else "nobody"
            argv[1:1] = ["-u", owner]
        # Its log goes to a file we hold open (a pipe nobody reads would fill and stall it).
        with (folder / "pgbouncer.log").open("wb") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        bouncer = cls(process=process, port=port, dbname=database.get("NAME") or "postgres", user=user, folder=folder)
        bouncer._wait_ready()
        return bouncer

    @property
    def url(self) -> str:
        return self.url_for(self.dbname)

    def url_for(self, dbname: str, *, application_name: str = "") -> str:
        options = {"application_name": application_name} if application_name else {}
        return dburl.build(
            {"USER": self.user, "HOST": "127.0.0.1", "PORT": str(self.port), "NAME": dbname, "OPTIONS": options}
        )

    def _wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self.process.returncode}: {self.log()[-2000:]}")
            try:
                with psycopg.connect(self.url, autocommit=True, prepare_threshold=None, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def log(self) -> str:
        return (self.folder / "pgbouncer.log").read_text(errors="replace")

    def server_connections(self) -> int:
        """Server connections PgBouncer holds for this database now (its SHOW SERVERS)."""
        with psycopg.connect(self.url_for("pgbouncer"), autocommit=True, prepare_threshold=None) as conn:
            cursor = conn.execute("SHOW SERVERS")
            # By the column's name: the second column is the user, which matched only when the
            # user and the database had the same name (postgres).
            database = [column.name for column in cursor.description or []].index("database")
            rows = cursor.fetchall()
        return sum(1 for row in rows if row[database] == self.dbname)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
