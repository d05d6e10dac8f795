"""A child process of a worker: `python -m reliableq.worker.child FD`.

It sets Django up once, says it is ready, and then runs the attempts the worker sends over the
socket FD, one at a time, answering each with its Finish (computed by the same executor as in
the worker). A reader thread takes the worker's messages while an attempt runs: a cancel request
for that attempt sets its job.cancel_requested. When the worker goes away (the socket closes),
the child exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import queue
import signal
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any


def resident_mb() -> float:
    """This process's resident memory now, in MB (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when its children stop
    import django

    django.setup()  # registers every app's handlers, as in the worker

    from ..models import Outcome
    from ..queue import ClaimedJob
    from . import executor
    from .handler_connections import drop_broken_connections

    conn = Connection(fd)
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    current: dict[str, Any] = {}

    def listen() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                if current.get("job") is not None:
                    os._exit(0)  # the worker is gone mid-attempt: nobody will read an answer
                inbox.put(("exit",))  # idle (or retired): exit as Python does, atexit hooks included
                return
            if message[0] == "run":
                # Made here, in the order the messages came: a cancel sent right after its run finds it.
                job = ClaimedJob(**message[1])
                object.__setattr__(job, "_sink", lambda job, value: conn.send(("progress", value)))
                current["job"] = job
                inbox.put(("run", job))
            elif message[0] == "cancel":
                running = current.get("job")
                if running is not None and running.lease_token == message[1]:
                    running.cancel.set()
            else:
                inbox.put(message)

    threading.Thread(target=listen, name="reliableq-child-inbox", daemon=True).start()
    conn.send(("ready", os.getpid()))
    while True:
        message = inbox.get()
        if message[0] == "exit":
            return
        job = message[1]
        try:
            if executor.handler_is_async(job.kind):
                result = asyncio.run(executor.run_attempt_async(job))
            else:
                result = executor.run_attempt(job)
        except BaseException as exc:  # SystemExit and the like: the attempt failed, the child serves on
            finish = executor.failure(job, outcome=Outcome.FAILED_TRANSIENT, error=executor.describe(exc))
            finish = dataclasses.replace(finish, traceback=executor.traceback_of(exc))
            result = executor.Result(finish=finish, seconds=0.0)
        finally:
            if current.get("job") is job:
                current.pop("job", None)
            drop_broken_connections()
        try:
            conn.send(("done", result.finish, result.seconds, resident_mb()))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            error = f"the handler's return value cannot be sent back from its child process: {exc}"
            finish = executor.failure(job, outcome=Outcome.FAILED_PERMANENT, error=error)
            conn.send(("done", finish, result.seconds, resident_mb()))


if __name__ == "__main__":
    main(int(sys.argv[1]))
