"""Job kinds for the demo and the tests. Each one misbehaves in one named way.

Only the kinds that the API tests submit say http=True; the rest (a poison pill among them)
can be enqueued by code only, which the security tests rely on.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import reliableq
from reliableq.queue import ClaimedJob


@reliableq.handler("demo.noop", http=True)
def noop(job: object) -> None:
    """Do nothing: the cost of the queue itself."""


@reliableq.handler("test.sleep", http=True)
def sleep(job: ClaimedJob) -> None:
    """Hold a slot for payload['seconds']."""
    time.sleep(float(job.payload.get("seconds", 1)))


@reliableq.handler("test.flaky", max_attempts=5, http=True)
def flaky(job: ClaimedJob) -> None:
    """Fail transiently on the first payload['failures'] attempts, then succeed."""
    if job.attempt <= int(job.payload.get("failures", 1)):
        raise reliableq.TransientError(f"attempt {job.attempt} failed on purpose")


@reliableq.handler("test.always_fails", max_attempts=3, http=True)
def always_fails(job: object) -> None:
    raise RuntimeError("this handler never succeeds")


@reliableq.handler("test.permanent")
def permanent(job: object) -> None:
    raise reliableq.PermanentError("the input can never be valid: password=hunter2")


@reliableq.handler("test.fail_with", max_attempts=1)
def fail_with(job: ClaimedJob) -> None:
    """Fail permanently with payload['message'] (the security tests put secrets in it)."""
    raise reliableq.PermanentError(str(job.payload.get("message", "failed")))


@reliableq.handler("test.poison", max_attempts=3)
def poison(job: object) -> None:
    """Kill the worker that runs it, every time."""
    os.kill(os.getpid(), signal.SIGKILL)


@reliableq.handler("test.stuck", timeout=1, max_attempts=2)
def stuck(job: ClaimedJob) -> None:
    """Outlive its 1 s timeout by payload['seconds']."""
    time.sleep(float(job.payload.get("seconds", 3)))


@reliableq.handler("chaos.flaky", max_attempts=6)
def chaos_flaky(job: ClaimedJob) -> None:
    """Fail transiently with probability payload['rate'], decided by the job id and attempt (reproducible)."""
    _chaos_roll(job)


def _chaos_roll(job: ClaimedJob) -> None:
    rate = float(job.payload.get("rate", 0.5))
    roll = hashlib.sha256(f"{job.id}:{job.attempt}".encode()).digest()[0] / 256
    if roll < rate:
        raise reliableq.TransientError(f"dependency failed on attempt {job.attempt} (rate {rate:g})")


@reliableq.handler("chaos.async_flaky", max_attempts=6)
async def chaos_async_flaky(job: ClaimedJob) -> None:
    """chaos.flaky on the worker's event loop, after payload['seconds']."""
    await asyncio.sleep(float(job.payload.get("seconds", 0)))
    _chaos_roll(job)


@reliableq.handler("chaos.isolated_flaky", max_attempts=6, isolation="process")
def chaos_isolated_flaky(job: ClaimedJob) -> None:
    """chaos.flaky in a child process, after payload['seconds'] (the chaos suite SIGKILLs children)."""
    time.sleep(float(job.payload.get("seconds", 0)))
    _chaos_roll(job)


@reliableq.handler("chaos.isolated_slow", max_attempts=4, timeout=30, isolation="process")
def chaos_isolated_slow(job: ClaimedJob) -> None:
    """Longer than a short lease, in a child: the worker's heartbeat keeps the job."""
    time.sleep(float(job.payload.get("seconds", 3)))


@reliableq.handler("chaos.slow", max_attempts=4, timeout=30)
def chaos_slow(job: ClaimedJob) -> None:
    """Run longer than a short lease: only the heartbeat keeps the job."""
    time.sleep(float(job.payload.get("seconds", 3)))


@reliableq.handler("test.snooze", max_attempts=1)
def snooze(job: ClaimedJob) -> None:
    """Snooze payload['times'] times for payload['seconds'] each, then succeed."""
    if job.snoozes < int(job.payload.get("times", 1)):
        raise reliableq.Snooze(float(job.payload.get("seconds", 0)))


@reliableq.handler("test.cancellable", timeout=300)
def cancellable(job: ClaimedJob) -> None:
    """Work for up to payload['seconds'], stopping as soon as an operator asks (Cancelled), unless
    payload['ignore'] says to finish anyway; payload['fail'] makes it fail instead of raising Cancelled."""
    deadline = time.monotonic() + float(job.payload.get("seconds", 60))
    while time.monotonic() < deadline:
        if job.cancel_requested and not job.payload.get("ignore"):
            if job.payload.get("fail"):
                raise RuntimeError("stopped half-way")
            raise reliableq.Cancelled()
        job.cancel.wait(0.02)


# -- handlers that misbehave: async, stuck, crashing, GIL-holding, leaking -----------------------


@reliableq.handler("test.async_echo", http=True, keep_return=True)
async def async_echo(job: ClaimedJob) -> dict[str, Any]:
    """Write a row through Django's async ORM (a ChargeRequest keyed by the job), after payload['seconds']."""
    from charges.models import ChargeRequest

    await asyncio.sleep(float(job.payload.get("seconds", 0)))
    await ChargeRequest.objects.acreate(idempotency_key=f"async:{job.id}", fault="")
    return {"pid": os.getpid()}


@reliableq.handler("test.async_sleep", timeout=30)
async def async_sleep(job: ClaimedJob) -> None:
    """Hold a slot for payload['seconds'] without holding a thread."""
    await asyncio.sleep(float(job.payload.get("seconds", 0.05)))


@reliableq.handler("test.async_hang", timeout=1, max_attempts=1)
async def async_hang(job: ClaimedJob) -> None:
    """Await forever: only its timeout's cancellation ends it."""
    await asyncio.Event().wait()


@reliableq.handler("test.async_cancellable", timeout=60)
async def async_cancellable(job: ClaimedJob) -> None:
    """Wait until an operator asks to cancel, then stop."""
    while not job.cancel_requested:
        await asyncio.sleep(0.02)
    raise reliableq.Cancelled()


@reliableq.handler("test.returns_coroutine", max_attempts=1)
def returns_coroutine(job: ClaimedJob) -> Any:
    """A sync handler that forgot to await: returns a coroutine instead of running it."""
    return async_sleep(job)


@reliableq.handler("test.hang", timeout=1, max_attempts=2)
def hang(job: ClaimedJob) -> None:
    """Block (nearly) forever in a thread, which nothing can stop."""
    time.sleep(float(job.payload.get("seconds", 3600)))


@reliableq.handler("test.isolated_echo", isolation="process", keep_return=True)
def isolated_echo(job: ClaimedJob) -> dict[str, Any]:
    """Write a row with the sync ORM from a child process, after payload['seconds']; say which process."""
    from charges.models import ChargeRequest

    time.sleep(float(job.payload.get("seconds", 0)))
    ChargeRequest.objects.create(idempotency_key=f"isolated:{job.id}:{os.getpid()}", fault="")
    return {"pid": os.getpid()}


@reliableq.handler("test.isolated_noop", isolation="process")
def isolated_noop(job: ClaimedJob) -> None:
    """Do nothing, in a child process: the cost of isolation itself."""


@reliableq.handler("test.segfault", isolation="process", max_attempts=3)
def segfault(job: ClaimedJob) -> None:
    """Crash the interpreter with a real SIGSEGV (a C extension's bug): read address 0."""
    ctypes.string_at(0)


@reliableq.handler("test.isolated_exit", isolation="process", max_attempts=1)
def isolated_exit(job: ClaimedJob) -> None:
    """End the child process at once, with payload['code'] (default 3), as a library's fatal error might."""
    os._exit(int(job.payload.get("code", 3)))


@reliableq.handler("test.isolated_hang", isolation="process", timeout=1, max_attempts=1)
def isolated_hang(job: ClaimedJob) -> None:
    """Block forever in a child, ignoring SIGTERM if payload['stubborn']: only SIGKILL ends it."""
    if job.payload.get("stubborn"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(3600)


@reliableq.handler("test.isolated_hang_soon", isolation="process", timeout=0.05, max_attempts=1)
def isolated_hang_soon(job: ClaimedJob) -> None:
    """Like test.isolated_hang, stubborn, with a timeout that passes before any child can start; it
    writes payload['marker'] when it begins."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(job.payload["marker"]).write_text("began")
    time.sleep(3600)


@reliableq.handler("test.isolated_cancellable", isolation="process", timeout=60)
def isolated_cancellable(job: ClaimedJob) -> None:
    """Wait in a child until an operator asks to cancel, then stop."""
    while not job.cancel_requested:
        job.cancel.wait(0.02)
    raise reliableq.Cancelled()


def hold_the_gil(job: ClaimedJob) -> None:
    """One C call that keeps the GIL for payload['seconds']: libc's sleep through ctypes.PyDLL,
    which (unlike CDLL) does not release it. No other thread of the process runs meanwhile."""
    ctypes.PyDLL(None).sleep(int(job.payload.get("seconds", 3)))


reliableq.handler("test.gil_isolated", isolation="process", timeout=60, max_attempts=3)(hold_the_gil)
reliableq.handler("test.gil_thread", isolation="thread", timeout=60, max_attempts=3)(hold_the_gil)

_leaked: list[bytes] = []


@reliableq.handler("test.leak", isolation="process", keep_return=True)
def leak(job: ClaimedJob) -> dict[str, Any]:
    """Keep payload['mb'] MB (default 200) for good, as a leaking library would; say which process."""
    _leaked.append(b"x" * (int(job.payload.get("mb", 200)) * 1_000_000))
    return {"pid": os.getpid()}


# -- observing a job: progress, results, traces ---------------------------------------------------


def _report_progress(job: ClaimedJob) -> None:
    steps = int(job.payload.get("steps", 10))
    for n in range(steps):
        job.progress(n + 1, steps, note=f"step {n + 1}")
        time.sleep(float(job.payload.get("step_seconds", 0.3)))


@reliableq.handler("test.progress", timeout=120, keep_result=True)
def reports_progress(job: ClaimedJob) -> dict[str, Any]:
    """Report progress at every step of payload['steps'], payload['step_seconds'] apart; return a summary."""
    _report_progress(job)
    return {"steps": int(job.payload.get("steps", 10)), "where": "thread"}


@reliableq.handler("test.isolated_progress", timeout=120, isolation="process")
def isolated_progress(job: ClaimedJob) -> None:
    """The same, from a child process."""
    _report_progress(job)


@reliableq.handler("test.async_progress", timeout=120)
async def async_progress(job: ClaimedJob) -> None:
    """The same, from the worker's event loop."""
    steps = int(job.payload.get("steps", 10))
    for n in range(steps):
        job.progress(n + 1, steps)
        await asyncio.sleep(float(job.payload.get("step_seconds", 0.3)))


@reliableq.handler("test.keeps_result", keep_result=True, http=True)
def keeps_result(job: ClaimedJob) -> Any:
    """Return payload['value'] (kept: job.result)."""
    return job.payload.get("value")


@reliableq.handler("test.unstorable_result", keep_result=True, max_attempts=3)
def unstorable_result(job: ClaimedJob) -> Any:
    """Return something JSON cannot hold."""
    return {"when": {1, 2, 3}}


@reliableq.handler("test.traced_failure", max_attempts=1)
def traced_failure(job: ClaimedJob) -> None:
    raise ValueError("the attempt's span records this")


def per_key(job: ClaimedJob) -> None:
    """Hold a slot for payload['seconds']; at most 2 of one concurrency_key run at once."""
    time.sleep(float(job.payload.get("seconds", 0.2)))


def rated(job: ClaimedJob) -> None:
    """Nothing: at most 10 start in any second, fleet-wide."""


def capped(job: ClaimedJob) -> None:
    """Hold a slot for payload['seconds']; at most 2 run at once across the fleet."""
    time.sleep(float(job.payload.get("seconds", 0.3)))


def every_second(job: ClaimedJob) -> None:
    """A periodic job: does nothing but exist once per slot."""


def fair(job: ClaimedJob) -> None:
    """Hold a slot for payload['seconds'] (default none); its claims rotate among fair_keys."""
    if job.payload.get("seconds"):
        time.sleep(float(job.payload["seconds"]))


def register_fair() -> None:
    """The fair kinds: one alone, and one with each limit a fair kind combines with."""
    reliableq.handler("test.fair", fair=True, http=True)(fair)
    reliableq.handler("test.fair_keyed", fair=True, max_running_per_key=1)(fair)
    reliableq.handler("test.fair_capped", fair=True, max_running=3)(fair)
    reliableq.handler("test.fair_rated", fair=True, rate_limit="1000/s")(fair)


# Registered only where a test asks for them (in the worker's environment and in the test
# itself): a fleet-wide cap adds a lock to every claim, and a cron kind enqueues forever.
if os.environ.get("RELIABLEQ_TEST_CAPPED"):
    reliableq.handler("test.capped", max_running=2)(capped)
if os.environ.get("RELIABLEQ_TEST_FLOW"):
    reliableq.handler("test.per_key", max_running_per_key=2)(per_key)
    reliableq.handler("test.rated", rate_limit="10/s")(rated)
if os.environ.get("RELIABLEQ_TEST_FAIR"):
    register_fair()
if os.environ.get("RELIABLEQ_TEST_CRON"):
    reliableq.handler("test.every_second", cron="* * * * * *")(every_second)


@reliableq.handler("wf.step", max_attempts=2, http=True)
def wf_step(job: ClaimedJob) -> dict[str, Any]:
    """A workflow member: fails for good if its payload says so, else returns what it saw upstream."""
    if job.payload.get("seconds"):
        time.sleep(float(job.payload["seconds"]))
    if job.payload.get("fail"):
        raise reliableq.PermanentError("the payload asked this member to fail")
    return {"member": job.member_name, "upstream": job.upstream}


@reliableq.handler("wf.callback", http=True, keep_result=True)
def wf_callback(job: ClaimedJob) -> dict[str, Any]:
    return dict(job.payload)


@reliableq.handler("chaos.wf_member", max_attempts=2, http=True)
def chaos_wf_member(job: ClaimedJob) -> dict[str, Any]:
    """A chaos workflow's member: flaky by payload['rate']; with payload['dies'], DEAD in its first run
    (attempts 1 and 2) and fine once replayed. Returns what it saw upstream, names only."""
    if job.payload.get("dies") and job.attempt <= 2:
        raise reliableq.PermanentError("this member dies in its first run")
    _chaos_roll(job)
    return {"upstream": sorted(job.upstream)}


# Durable steps, sleep and events. Each step's function appends "<job id> <step> <attempt>" to the file
# payload['log'] names, so a test (or the chaos driver) counts how often each ran across processes.


def ran(job: ClaimedJob, what: str) -> str:
    """A step's function: its run, logged (payload['log']), and payload['seconds'] of work."""
    log = job.payload.get("log")
    if log:
        with open(log, "a") as file:
            file.write(f"{job.id} {what} {job.attempt}\n")
    if job.payload.get("seconds"):
        time.sleep(float(job.payload["seconds"]))
    return what


@reliableq.handler("steps.three", max_attempts=10, keep_result=True, timeout=120)
def three_steps(job: ClaimedJob) -> list[str]:
    """Three steps; payload['fail_at'] names one that raises (transient) in the first attempt."""
    done = []
    for name in ("one", "two", "three"):
        if job.payload.get("fail_at") == name and job.attempt == 1:
            job.step(name, _fail_once, name)
        done.append(job.step(name, ran, job, name))
    return done


def _fail_once(name: str) -> None:
    raise reliableq.TransientError(f"step {name} failed in the first attempt")


@reliableq.handler("steps.three_async", max_attempts=10, keep_result=True, timeout=120)
async def three_steps_async(job: ClaimedJob) -> list[str]:
    """The same, awaited: a sync function and an async one."""

    async def later(what: str) -> str:
        await asyncio.sleep(0)
        return ran(job, what)

    return [await job.step("one", ran, job, "one"), await job.step("two", later, "two"),
            await job.step("three", ran, job, "three")]  # fmt: skip


@reliableq.handler("steps.three_isolated", max_attempts=10, keep_result=True, timeout=120, isolation="process")
def three_steps_isolated(job: ClaimedJob) -> list[str]:
    """The same, in a child process."""
    return [job.step(name, ran, job, name) for name in ("one", "two", "three")]


@reliableq.handler("steps.loop", max_attempts=10, keep_result=True, timeout=300)
def checkpointed_loop(job: ClaimedJob) -> int:
    """payload['items'] items, payload['seconds'] each, a checkpoint after each one; returns where it resumed."""
    start = job.checkpointed("next", default=0)
    for n in range(start, int(job.payload["items"])):
        ran(job, f"item-{n}")
        job.checkpoint("next", n + 1)
    return int(start)


@reliableq.handler("steps.sleeper", max_attempts=3, keep_result=True, timeout=60)
def sleeper(job: ClaimedJob) -> str:
    """A step, a sleep of payload['sleep'] seconds, a step."""
    job.step("before", ran, job, "before")
    job.sleep("nap", float(job.payload.get("sleep", 1)))
    return str(job.step("after", ran, job, "after"))


@reliableq.handler("steps.sleeper_async", max_attempts=3, keep_result=True, timeout=60)
async def sleeper_async(job: ClaimedJob) -> str:
    await job.step("before", ran, job, "before")
    await job.sleep("nap", float(job.payload.get("sleep", 1)))
    return str(await job.step("after", ran, job, "after"))


@reliableq.handler("steps.waiter", max_attempts=3, keep_result=True, timeout=60, http=True)
def waiter(job: ClaimedJob) -> Any:
    """Wait for the event payload['event'] (payload['timeout'] seconds, or none); return its payload, or
    "timed out"."""
    job.step("before", ran, job, "before")
    try:
        paid = job.wait_for(job.payload["event"], timeout=job.payload.get("timeout"))
    except reliableq.WaitTimeout:
        return "timed out"
    ran(job, "after")
    return paid


@reliableq.handler("steps.waiter_async", max_attempts=3, keep_result=True, timeout=60)
async def waiter_async(job: ClaimedJob) -> Any:
    try:
        return await job.wait_for(job.payload["event"], timeout=job.payload.get("timeout"))
    except reliableq.WaitTimeout:
        return "timed out"


@reliableq.handler("steps.waiter_isolated", max_attempts=3, keep_result=True, timeout=60, isolation="process")
def waiter_isolated(job: ClaimedJob) -> Any:
    return job.wait_for(job.payload["event"], timeout=job.payload.get("timeout"))


# The steps demo (manage.py demo_steps): three steps, each run of their functions committed to
# testproject.StepRun, so that the demo counts them from PostgreSQL.


def _demo_step(job_id: str, step: str, attempt: int) -> str:
    from testproject.models import StepRun

    StepRun.objects.create(job_id=job_id, step=step, attempt=attempt, pid=os.getpid())  # autocommit: its own
    return f"{step} done"


DEMO_STEPS = ("reserve", "pack", "ship")


@reliableq.handler("demo.three_steps", max_attempts=5, keep_result=True, timeout=300)
def demo_three_steps(job: ClaimedJob) -> list[str]:
    """reserve, pack, ship; after the step payload['pause_after'] the first attempt waits (outside any
    step, payload['pause_seconds']) for the demo's SIGKILL."""
    done = []
    for name in DEMO_STEPS:
        done.append(job.step(name, _demo_step, str(job.id), name, job.attempt))
        if job.payload.get("pause_after") == name and job.attempt == 1:
            time.sleep(float(job.payload.get("pause_seconds", 120)))
    return done
