"""Start and stop the project's real processes: the API server (gunicorn) and workers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_argv(port: int, *, workers: int = 2, threads: int = 8) -> list[str]:
    """The command line of gunicorn serving testproject on 127.0.0.1:port (the jobs API and the charge service)."""
    return [
        sys.executable, "-m", "gunicorn", "testproject.wsgi:application",
        "--bind", f"127.0.0.1:{port}",
        "--workers", str(workers), "--threads", str(threads), "--worker-class", "gthread",
        "--graceful-timeout", "5", "--log-level", "warning",
        # Let Django, not gunicorn's HTML error pages, answer over-long URLs and headers,
        # so every answer is a problem document (Django still caps bodies and fields).
        "--limit-request-line", "0", "--limit-request-field_size", "0",
    ]  # fmt: skip


def start_api(
    port: int, *, env: dict[str, str], log: IO[bytes] | int = subprocess.DEVNULL, workers: int = 2, threads: int = 8
) -> subprocess.Popen[bytes]:
    """gunicorn serving testproject on 127.0.0.1:port (the jobs API and the charge service)."""
    return subprocess.Popen(
        api_argv(port, workers=workers, threads=threads), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )


def start_worker(
    args: list[str], *, env: dict[str, str], log: IO[bytes] | int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", *args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_http(url: str, *, timeout: float = 30.0, process: subprocess.Popen[Any] | None = None) -> None:
    """Poll until `url` answers at all (any HTTP status), or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode} before answering {url}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {timeout}s") from None
            time.sleep(0.1)


def stop(process: subprocess.Popen[Any], *, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it will not go; resumes a stopped process first."""
    if process.poll() is not None:
        return
    try:
        os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
    except ProcessLookupError:
        pass


def child_env(**overrides: Any) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def private_log(path: Path) -> IO[bytes]:
    """`path` opened for writing, readable by its owner only (worker logs carry lease tokens), even
    when an earlier run left it with another mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")
