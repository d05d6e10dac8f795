"""A fair kind's claim and its enqueue keep a bounded cost, whatever the number of keys or the depth of
one key's backlog, under every statistics state of the plan matrix.

Beside the matrix's working set (tables.WORKING_SET), the fair kind's backlog is loaded after each
state was made, older than every other due job so that the claim's pick meets it first: 50,000 due
jobs over 10,000 keys, or 1,000,000 due jobs of one key. Each statement the claim and the enqueue
send is explained (custom and generic plans) and held to fixed bounds, as worker_path's are.
"""

from __future__ import annotations

import pytest

import reliableq
from reliableq import queue as jobqueue
from reliableq import services
from reliableq.options import JobOptions
from reliableq.registry import Limits
from reliableq.services import NewJob

from . import tables
from .conftest import Figures
from .test_worker_statement_plans import STATES, check_worker_path
from .worker_path import WORKER, Statement

FAIR = "test.fair"  # registered fair by the fair_kinds fixture (the enqueue's rules need it)
pytestmark = pytest.mark.usefixtures("fair_kinds")


def load_fair(count: int, keys: int) -> None:
    """`count` due jobs of the fair kind over `keys` keys, each key's turns 0, 1, 2..., due before the rest."""
    tables._exec(
        f"""
        INSERT INTO {tables.JOB} (id, kind, queue, priority, payload, max_attempts, last_error, dedupe_scope,
                                  created_at, updated_at, status, attempts, worker_id, run_at, fair_key, fair_seq)
        SELECT gen_random_uuid(), %s, 'default', 0, '{{}}', 5, '', '', now() - interval '3 hours', now(),
               'PENDING', 0, '', now() - interval '2 hours' + g * interval '1 us', 'k' || (g %% %s), (g / %s)::float8
          FROM generate_series(0, %s - 1) g
        """,
        [FAIR, keys, keys, count],
    )


def claim() -> object:
    return jobqueue.claim(
        worker_id=WORKER,
        queues=("default",),
        limit=10,
        lease_seconds=30,
        limits={FAIR: Limits(fair=True)},
        rescue=False,
    )


def guard() -> bool:
    """What the maintenance leader runs once per rescue interval, with a fair kind registered."""
    jobqueue.guard_claims(("default",), 10, fair=[FAIR])
    return True


def enqueue_one() -> object:
    return services.submit(FAIR, {}, JobOptions(fair_key="k7"))


def enqueue_many() -> object:
    return reliableq.enqueue_many(FAIR, [{}] * 100, fair_key="k7")


def enqueue_batch() -> object:
    jobs = [NewJob(kind=FAIR, payload={}, options=JobOptions(fair_key=f"k{n}")) for n in range(50)]
    return services.submit_many(jobs)


# A fair kind that also has a limit (max_running, a rate) is claimed as limited kinds are, after the
# others: the others' pick passes over its due rows, as it passes over any limited kind's (the worker's
# floors bound that between sweeps). Its own pick is the fair one measured here. The enqueue's reads
# have no guard of their own: the claims' guard analyzes the table they read.
STATEMENTS = [
    Statement(name="claim_fair", call=claim, what="claim 10 of a fair kind", buffers=1_000, rows=100, guard=guard),
    Statement(name="enqueue_fair", call=enqueue_one, what="enqueue one", buffers=300, rows=10, guard=guard),
    Statement(name="enqueue_many_fair", call=enqueue_many, what="enqueue 100", buffers=3_000, rows=10, guard=guard),
    Statement(name="batch_fair", call=enqueue_batch, what="a batch over 50 keys", buffers=3_000, rows=200, guard=guard),
]


def check(state: str, figures: Figures, *, generic: bool = False) -> list[str]:
    return check_worker_path(state, figures, generic=generic, statements=STATEMENTS)


@pytest.mark.parametrize("state", list(STATES))
def test_a_fair_claim_and_enqueue_stay_bounded_beside_10000_keys(state: str, plan_tables: None, figures: Figures):
    STATES[state](tables.WORKING_SET)
    load_fair(50_000, keys=10_000)
    failures = check(state, figures) + check(state, figures, generic=True)
    assert not failures, "\n".join(failures) + "\n" + figures.table()


# A million rows to load: minutes under coverage, so nightly (pytest -m nightly), as the bench smoke is.
@pytest.mark.nightly
@pytest.mark.parametrize("state", ["never analyzed", "analyzed empty"])
def test_a_fair_claim_and_enqueue_stay_bounded_beside_one_key_of_a_million_due_jobs(
    state: str, plan_tables: None, figures: Figures
):
    STATES[state](tables.WORKING_SET)
    load_fair(1_000_000, keys=1)
    failures = check(state, figures) + check(state, figures, generic=True)
    assert not failures, "\n".join(failures) + "\n" + figures.table()
