"""What a dense workflow costs the API: the POST, reading it back, and everyone's /v1/ready meanwhile.

    python -m bench.workflowapi [--members 850,447] [--reps 3] [--readers 6] [--seconds 10]

One gunicorn (gthread, 1 worker x 8 threads, DEBUG off, the site's default throttle rates unless
--submit-rate or --read-rate say otherwise), as issue 44 attacked it. For each --members N, each
repetition POSTs a workflow of N `demo.noop` members, each `after` every earlier one (N(N-1)/2
entries), and, if it was stored, reads it back with GET /v1/workflows/<id>, following `next`
until the last page. Every repetition is printed: the POST's status, seconds and body size; the
GET's pages, seconds and bytes over all pages, and the largest page.

Then --readers threads of that user loop over GET of the largest workflow stored (or the size
--readers-of names) for --seconds, while another client times GET /v1/ready every 0.2 s: its
median and worst, and how the readers were answered (200, 429). Needs a database (DATABASE_URL
or the embedded server); the run's workflows are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django

django.setup()

import requests  # noqa: E402
from django.core.management import call_command  # noqa: E402

from reliableq.models import Workflow, WorkflowCount, WorkflowEdge  # noqa: E402
from testproject import accounts, processes  # noqa: E402

USER = "bench-workflowapi"


def dense(members: int) -> dict[str, object]:
    """N members, each after every earlier one."""
    names = [f"m{i}" for i in range(members)]
    return {
        "name": f"dense {members}",
        "members": [{"name": n, "kind": "demo.noop", "payload": {}, "after": names[:i]} for i, n in enumerate(names)],
    }


@dataclass
class Read:
    pages: int = 0
    seconds: float = 0.0
    size: int = 0
    largest: int = 0
    statuses: list[int] = field(default_factory=list)


def read_all(session: requests.Session, url: str) -> Read:
    """GET the workflow, then each `next` page (if the answer has one) until the last."""
    read = Read()
    following: str | None = url
    while following:
        began = time.perf_counter()
        answer = session.get(following, timeout=300)
        read.seconds += time.perf_counter() - began
        read.pages += 1
        read.size += len(answer.content)
        read.largest = max(read.largest, len(answer.content))
        read.statuses.append(answer.status_code)
        following = answer.json().get("next") if answer.status_code == 200 else None
    return read


def readers(base: str, token: str, url: str, *, count: int, seconds: float) -> tuple[list[float], Counter[int]]:
    """Readers loop over GET `url` while /v1/ready is timed: (ready's seconds, the readers' statuses)."""
    stop = threading.Event()
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def loop() -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        while not stop.is_set():
            code = session.get(url, timeout=300).status_code
            with lock:
                statuses[code] += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    ready: list[float] = []
    deadline = time.monotonic() + seconds
    probe = requests.Session()
    while time.monotonic() < deadline:
        began = time.perf_counter()
        probe.get(base + "/v1/ready", timeout=300)
        ready.append(time.perf_counter() - began)
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    return ready, statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workflowapi", description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", default="850,447", help="comma-separated sizes of the dense workflow")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--readers", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the readers loop")
    parser.add_argument(
        "--readers-of", type=int, default=0, help="the size the readers read (default: the largest stored)"
    )
    parser.add_argument("--submit-rate", default="", help="reliableq_submit's rate (default: the site's)")
    parser.add_argument("--read-rate", default="", help="reliableq_read's rate (default: the site's)")
    args = parser.parse_args(argv)

    call_command("migrate", verbosity=0)
    token = accounts.token_for(USER, "reliableq.submit_job")
    env: dict[str, str] = {"DJANGO_DEBUG": "0", "RELIABLEQ_LOG_LEVEL": "WARNING"}
    if args.submit_rate:
        env["TESTPROJECT_SUBMIT_RATE"] = args.submit_rate
    if args.read_rate:
        env["TESTPROJECT_THROTTLE_RATES"] = json.dumps({"reliableq_read": args.read_rate})
    port = processes.free_port()
    base = f"http://127.0.0.1:{port}"
    log = Path(tempfile.mkdtemp(prefix="bench-workflowapi-")) / "gunicorn.log"
    made: list[str] = []
    with log.open("wb") as log_file:
        server = processes.start_api(port, env=processes.child_env(**env), log=log_file, workers=1)
    try:
        processes.wait_http(base + "/v1/schema", timeout=60, process=server)
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        head = ["members", "after entries", "rep", "POST", "POST s", "body MB", "GET pages", "GET s (all pages)",
                "GET MB (all)", "largest page MB"]  # fmt: skip
        print("| " + " | ".join(head) + " |")
        print("|" + " ---: |" * len(head))
        stored: dict[int, str] = {}
        for n in (int(m) for m in args.members.split(",") if m.strip()):
            body = json.dumps(dense(n), separators=(",", ":"))  # compact: 850 members fit Django's 2.5 MB
            for rep in range(args.reps):
                began = time.perf_counter()
                posted = session.post(
                    base + "/v1/workflows", data=body, headers={"Content-Type": "application/json"}, timeout=600
                )
                post_seconds = time.perf_counter() - began
                cells = [f"{n:,}", f"{n * (n - 1) // 2:,}", str(rep + 1), str(posted.status_code),
                         f"{post_seconds:.2f}", f"{len(body) / 1e6:.2f}"]  # fmt: skip
                if posted.status_code in (200, 202):
                    made.append(posted.json()["id"])
                    stored[n] = f"{base}/v1/workflows/{made[-1]}"
                    read = read_all(session, stored[n])
                    cells += [
                        str(read.pages),
                        f"{read.seconds:.2f}",
                        f"{read.size / 1e6:.2f}",
                        f"{read.largest / 1e6:.2f}",
                    ]
                else:
                    cells += ["-", "-", "-", "-"]
                print("| " + " | ".join(cells) + " |", flush=True)
        read_url = stored.get(args.readers_of or max(stored, default=0), "")
        if read_url and args.readers:
            ready, statuses = readers(base, token, read_url, count=args.readers, seconds=args.seconds)
            size = next(n for n, url in stored.items() if url == read_url)
            print(
                f"\n{args.readers} readers of the {size:,}-member workflow for {args.seconds:.0f} s: GET /v1/ready "
                f"median {statistics.median(ready) * 1000:.0f} ms, worst {max(ready) * 1000:.0f} ms "
                f"({len(ready)} probes); the readers' answers {dict(sorted(statuses.items()))}"
            )
    finally:
        processes.stop(server)
        WorkflowEdge.objects.filter(workflow__in=made).delete()
        WorkflowCount.objects.filter(workflow__in=made).delete()
        Workflow.objects.filter(pk__in=made).delete()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
