"""python manage.py demo, run as a user runs it, against the test database."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import psutil
import pytest

from testproject.processes import ROOT
from tests.support import worker_env

pytestmark = [pytest.mark.slow]


def orphans_on(db_url: str) -> list[psutil.Process]:
    """Live processes started with DATABASE_URL = the test database that this one did not start.

    The demo's leftovers would be orphans by now (reparented away from the demo), while the
    session's own charge service is still a child of this process.
    """
    me = psutil.Process()
    mine = {me.pid, *(c.pid for c in me.children(recursive=True))}
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid in mine:
            continue
        try:
            if p.environ().get("DATABASE_URL") == db_url and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_the_demo_kills_a_worker_mid_charge_and_reports_a2_h2_c1_f1_and_leaves_no_process_behind(db_url):
    demo = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "demo"],
        cwd=ROOT,
        env=worker_env(db_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Remember every descendant the demo starts, while it runs: once it exits they are orphans.
    children: dict[int, float] = {}
    me = psutil.Process(demo.pid)
    deadline = time.monotonic() + 120  # the demo gives up by itself after 90 s
    while demo.poll() is None:
        if time.monotonic() > deadline:
            demo.kill()
            pytest.fail(f"the demo still ran after 120 s:\n{demo.communicate()[0]}")
        try:
            descendants = me.children(recursive=True)
        except psutil.NoSuchProcess:
            descendants = []  # the demo just exited
        for child in descendants:
            try:
                children.setdefault(child.pid, child.create_time())
            except psutil.NoSuchProcess:
                continue  # gone already: nothing left behind there
        try:
            demo.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass
    output = demo.stdout.read()
    demo.stdout.close()

    assert demo.returncode == 0, output
    assert len(children) >= 4, f"expected gunicorn and three workers, saw {children}"  # not a vacuous check below
    killed = [line for line in output.splitlines() if "worker-A was killed" in line]
    assert len(killed) == 1, output
    assert re.search(r"\bSUCCEEDED\s+2  2  1  1\b", killed[0]), killed[0]
    assert "The killed job: A=2, H=2, C=1, F=1. It ran twice; it charged once; it finalized once." in output
    assert "all processes stopped" in output

    survivors = []
    for pid, created in children.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                survivors.append(p)
        except psutil.NoSuchProcess:
            continue
    assert not survivors, [(p.pid, p.cmdline()) for p in survivors]
    left = orphans_on(db_url)
    assert not left, [(p.pid, p.cmdline()) for p in left]
