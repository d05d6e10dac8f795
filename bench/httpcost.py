"""Instructions per request of the HTTP paths, counted by valgrind's callgrind: a cost that other
guests of a shared machine cannot move, where requests per second move by a factor of two.

    python -m bench.httpcost [--requests 200] [--paths insert,drf,api]

Each path runs in its own Python process under `valgrind --tool=callgrind`, through Django's WSGI
handler (no server, no socket: the application's own work and the database driver's client
side; PostgreSQL's work is not counted, `python -m bench.http` reports it as CPU time), twice:
once with a few requests to warm up, once with --requests more. The difference divided by
--requests is the cost of one request. Paths:

- `insert`: testproject's /bench/insert, a plain Django view making the same INSERT as the API;
- `drf`: /bench/drf-insert, the same through the API's DRF base class with no login;
- `api`: POST /v1/jobs with a token (authentication, permission, throttle, validation, document).

Needs valgrind (Debian's `valgrind`) and a database (DATABASE_URL or the embedded server).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
BENCH_KEY = os.environ.setdefault("TESTPROJECT_BENCH_VIEWS", secrets.token_hex(20))
os.environ.setdefault("TESTPROJECT_SUBMIT_RATE", "1000000000/s")
os.environ.setdefault("RELIABLEQ_HTTP_QUEUES", '["*"]')
os.environ.setdefault("RELIABLEQ_MAX_PENDING_PER_SUBMITTER", "None")

QUEUE = "bench-httpcost"
USER = "bench-httpcost"
PATHS = {"insert": "/bench/insert", "drf": "/bench/drf-insert", "api": "/v1/jobs"}
LABELS = {
    "insert": "insert view (plain Django, same INSERT, no login)",
    "drf": "DRF view of the API's base class (same INSERT, no login)",
    "api": "POST /v1/jobs",
}
WARM = 20


def _setup(*, migrate: bool) -> str:
    """Django set up (the database migrated first if asked), the token of a user who may submit."""
    import django

    django.setup()
    from django.core.management import call_command

    from testproject import accounts

    if migrate:
        call_command("migrate", verbosity=0)
    return accounts.token_for(USER, "reliableq.submit_job")


def post(handler: Any, path: str, body: bytes, **headers: str) -> str:
    """POST `body` (JSON) to `path` through a WSGI handler, in this process: the answer's status line.
    `headers` are WSGI keys (HTTP_AUTHORIZATION=...)."""
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000",
        "HTTP_HOST": "127.0.0.1:8000", "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json", "wsgi.url_scheme": "http", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", **headers,
    }  # fmt: skip
    status: list[str] = []
    answer = handler(environ, lambda code, _headers, status=status: status.append(code))
    b"".join(answer)
    answer.close()
    return status[0]


def _inner(path: str, count: int) -> None:
    """Make `count` requests of the path through Django's WSGI handler (run under valgrind)."""
    token = _setup(migrate=False)  # the outer process migrated
    from django.core.handlers.wsgi import WSGIHandler

    handler = WSGIHandler()
    body = json.dumps({"kind": "demo.noop", "payload": {"n": 1}, "queue": QUEUE}).encode()
    who = {"HTTP_AUTHORIZATION": f"Token {token}"} if path == "api" else {"HTTP_X_BENCH_KEY": BENCH_KEY}
    for _ in range(count):
        status = post(handler, PATHS[path], body, **who)
        if not status.startswith("202"):
            raise SystemExit(f"{PATHS[path]} answered {status}")


def _instructions(path: str, count: int) -> int:
    # Not under a coverage tracer, even when this command runs under one: it would be counted too.
    env = {k: v for k, v in os.environ.items() if k not in ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")}
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "bench.httpcost", "--inner", path, str(count)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        raise SystemExit(f"callgrind run of {path} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.httpcost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--paths", default="insert,drf,api")
    parser.add_argument("--inner", nargs=2, metavar=("PATH", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        _inner(args.inner[0], int(args.inner[1]))
        return 0
    if not shutil.which("valgrind"):
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    names = [name.strip() for name in args.paths.split(",") if name.strip()]
    unknown = sorted(set(names) - set(PATHS))
    if unknown:
        print(f"unknown path(s) {unknown}; choose from {sorted(PATHS)}", file=sys.stderr)
        return 2
    _setup(migrate=True)  # once here, so that the runs below find the user and the migrated database
    runs = [(name, count) for name in names for count in (WARM, WARM + args.requests)]
    print(f"  {len(runs)} runs under callgrind, two at a time (about a minute each)", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=2) as pool:
        counted = dict(zip(runs, pool.map(lambda run: _instructions(*run), runs), strict=True))
    from reliableq.models import Job

    Job.objects.filter(queue=QUEUE).delete()
    per = {name: (counted[(name, WARM + args.requests)] - counted[(name, WARM)]) / args.requests for name in names}
    base = per.get("insert")
    print()
    print(f"Instructions per request (callgrind, {args.requests} requests after {WARM}; the application's side only)")
    print()
    print("| path | instructions per request | insert view / this path |")
    print("| --- | ---: | ---: |")
    for name in names:
        ratio = f"{base / per[name]:.0%}" if base else "-"
        print(f"| {LABELS[name]} | {per[name] / 1e6:.2f} M | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
