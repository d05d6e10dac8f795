"""Issue 44, points 3 to 5: a workflow costs the API what its graph costs, and reading it back is
bounded; a request no window of the rate admits says so; callbacks are their submitter's jobs; a
bad cursor is a 400.

Each attack over real HTTP to a live gunicorn. Where a smaller graph shows the same point (a
lowered rate, a page of a chain), the test uses it: the bound of 100,000 `after` entries is a
constant, and a workflow that reaches it takes seconds to store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import reliableq
from reliableq.api.workflow_pages import PAGE
from reliableq.models import Job, JobStatus, Workflow, WorkflowEdge
from reliableq.testing import run_due
from testproject import processes

from .conftest import Client, problem, start_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBMIT = "reliableq.submit_job"
NOOP = {"kind": "demo.noop", "payload": {}}


def dense(members: int) -> dict[str, Any]:
    """Members each `after` every earlier one: members * (members - 1) / 2 entries."""
    names = [f"m{i}" for i in range(members)]
    return {"members": [{**NOOP, "name": n, "after": names[:i]} for i, n in enumerate(names)]}


def chain(members: int) -> dict[str, Any]:
    """m0 -> m1 -> ...: one entry per member but the first."""
    return {"members": [{**NOOP, "name": f"m{i}", "after": [f"m{i - 1}"] if i else []} for i in range(members)]}


def post_workflow(client: Client, body: dict[str, Any]) -> Any:
    # Compact, as an attacker sends it: the 850-member graph is 2.5 MB so, under Django's body limit.
    text = json.dumps(body, separators=(",", ":"))
    return client.request("POST", "/v1/workflows", data=text, headers={"Content-Type": "application/json"})


def nothing_made() -> bool:
    return not Workflow.objects.exists() and not Job.objects.exists() and not WorkflowEdge.objects.exists()


# -- 3: the edges are bounded, and charged -----------------------------------------------------


def test_the_dense_graph_of_the_issue_is_413_naming_the_bound_and_nothing_is_made(client_of):
    """850 members, each after every earlier one: 360,825 entries, stored in 8 to 30 s before."""
    attacker = client_of("attacker", SUBMIT)

    refused = post_workflow(attacker, dense(850))

    body = problem(refused, 413)
    assert "100,000 `after` entries" in body["detail"] and "360,825" in body["detail"], body
    assert nothing_made()


def test_a_graph_is_charged_its_after_entries_beyond_one_per_member(client_of, db_url: str, tmp_path: Path):
    site = start_site(tmp_path, db_url, workers=1, TESTPROJECT_SUBMIT_RATE="100/d")  # no run straddles a day
    try:
        dense_user, chain_user, greedy = (
            client_of("dense", SUBMIT),
            client_of("chain", SUBMIT),
            client_of("greedy", SUBMIT),
        )
        dense_user.site = chain_user.site = greedy.site = site
        twelve = post_workflow(dense_user, dense(12))  # 66 entries: costs 66, not 12
        then = post_workflow(dense_user, chain(35))  # 35 more: 101 > 100
        a_chain = post_workflow(chain_user, chain(100))  # 99 entries: costs its 100 members, as before
        fifteen = post_workflow(greedy, dense(15))  # 105 entries: more than a whole window
    finally:
        processes.stop(site.process)

    assert twelve.status_code == 202, twelve.text[:300]
    problem(then, 429)
    assert int(then.headers["Retry-After"]) > 0
    assert a_chain.status_code == 202, a_chain.text[:300]
    assert "100/d" in problem(fifteen, 413)["detail"] and "Retry-After" not in fifteen.headers
    assert sorted(Workflow.objects.values_list("members", flat=True)) == [12, 100]


def test_more_than_100000_after_entries_raise_invalid_job_in_python():
    wf = reliableq.workflow(name="dense")
    members = [wf.add("demo.noop", {}, name="m0")]
    for i in range(1, 448):  # 448 * 447 / 2 = 100,128 entries
        members.append(wf.add("demo.noop", {}, name=f"m{i}", after=members))

    with pytest.raises(reliableq.InvalidJob, match="100,000 `after` entries in all, not 100,128"):
        wf.enqueue()
    assert nothing_made()


# -- 3: reading a workflow back is paged and throttled as a read -------------------------------


def test_a_workflow_is_read_a_page_at_a_time_and_each_page_is_a_throttled_read(client_of, db_url, tmp_path):
    """A chain of 1,500 members: a page of 1,000, then the rest through `next`; the reads count
    against reliableq_read (3 a day here), where before one GET answered every member, unthrottled."""
    owner = client_of("owner", SUBMIT)
    wf = reliableq.workflow(name="long")
    previous = None
    for i in range(PAGE + 500):
        previous = wf.add("demo.noop", {}, name=f"m{i}", after=[previous] if previous else [])
    record = wf.enqueue(submitted_by=owner.user)
    site = start_site(tmp_path, db_url, workers=1, TESTPROJECT_THROTTLE_RATES='{"reliableq_read": "3/d"}')
    try:
        owner.site = site
        first = owner.request("GET", f"/v1/workflows/{record.id}")
        second = owner.session.get(first.json()["next"], headers={"Authorization": f"Token {owner.token}"}, timeout=30)
        third = owner.request("GET", f"/v1/workflows/{record.id}?page_size=10")
        fourth = owner.request("GET", f"/v1/workflows/{record.id}?page_size=10")
    finally:
        processes.stop(site.process)

    assert first.status_code == 200 and second.status_code == 200 and third.status_code == 200
    pages = [first.json()["members"], second.json()["members"]]
    assert [len(p) for p in pages] == [PAGE, 500]
    ids = [m["id"] for p in pages for m in p]
    assert ids == sorted(ids) and len(set(ids)) == PAGE + 500 == Job.objects.filter(workflow=record).count()
    after = {m["name"]: m["after"] for p in pages for m in p}
    assert all(after[f"m{i}"] == [f"m{i - 1}"] for i in range(1, PAGE + 500))  # across the pages too
    assert second.json()["next"] is None and len(third.json()["members"]) == 10
    assert first.json()["callbacks"] == [] and first.json()["status"] == "RUNNING"
    problem(fourth, 429)
    assert int(fourth.headers["Retry-After"]) > 0


# -- 4: a request larger than the rate ever admits ---------------------------------------------


def test_a_workflow_larger_than_the_whole_rate_is_413_naming_it_without_retry_after(client_of):
    """10,000 members at the default rate (6000/m): before, a 429 whose Retry-After never came true."""
    planner = client_of("planner", SUBMIT)

    refused = post_workflow(planner, {"members": [{**NOOP, "name": f"m{i}"} for i in range(10_000)]})

    detail = problem(refused, 413)["detail"]
    assert "Retry-After" not in refused.headers
    assert "6000/m" in detail and "reliableq_submit" in detail and "raise" in detail and "split" in detail, detail
    assert nothing_made()


# -- 5: callbacks are their submitter's jobs ---------------------------------------------------


def test_a_workflows_callbacks_count_against_the_submitters_bound_when_it_is_submitted(
    client_of, db_url: str, tmp_path: Path
):
    site = start_site(tmp_path, db_url, workers=1, RELIABLEQ_MAX_PENDING_PER_SUBMITTER="3")
    try:
        user = client_of("ada", SUBMIT)
        user.site = site
        body = {**chain(2), "callbacks": {"success": NOOP, "complete": NOOP}}
        over = post_workflow(user, body)  # 2 members and 2 callbacks: 4 > 3
        body["callbacks"].pop("complete")
        fits = post_workflow(user, body)
    finally:
        processes.stop(site.process)
    assert "MAX_PENDING_PER_SUBMITTER" in problem(over, 429)["detail"]
    assert fits.status_code == 202, fits.text[:300]


def test_a_callback_records_its_submitter_and_counts_against_the_bound(client_of, db_url: str, tmp_path: Path):
    site = start_site(tmp_path, db_url, workers=1, RELIABLEQ_MAX_PENDING_PER_SUBMITTER="3")
    try:
        user = client_of("ada", SUBMIT)
        user.site = site
        made = post_workflow(user, {**chain(1), "callbacks": {"success": NOOP}})
        assert made.status_code == 202, made.text[:300]
        assert [r.status for r in run_due(["default"], limit=1)] == [JobStatus.SUCCEEDED]
        callback = Job.objects.get(workflow_id=made.json()["id"], member_name__isnull=True)
        three = user.request("POST", "/v1/jobs/batch", json={"jobs": [NOOP] * 3})  # 1 callback + 3 > 3
        two = user.request("POST", "/v1/jobs/batch", json={"jobs": [NOOP] * 2})
        read = user.request("GET", f"/v1/workflows/{made.json()['id']}")
    finally:
        processes.stop(site.process)
    assert callback.submitted_by == "ada" and callback.status == JobStatus.PENDING
    assert "MAX_PENDING_PER_SUBMITTER" in problem(three, 429)["detail"]
    assert two.status_code == 202, two.text[:300]
    [fired] = read.json()["callbacks"]
    assert (fired["event"], fired["run"], fired["id"]) == ("success", 1, str(callback.id))


# -- 5: a bad cursor -------------------------------------------------------------------------


def test_a_bad_cursor_or_page_size_is_400_and_a_next_link_passed_back_works(client_of):
    operator = client_of("olga", SUBMIT, "reliableq.view_job")
    for n in range(3):
        assert operator.submit({**NOOP, "payload": {"n": n}}).status_code == 202
    workflow = reliableq.workflow(name="w")
    workflow.add("demo.noop", {}, name="a")
    record = workflow.enqueue()

    quote = operator.request("GET", "/v1/jobs?cursor=%27")  # read as the first page before
    not_ours = operator.request("GET", "/v1/jobs?cursor=bm9uc2Vuc2U%3D")  # base64 of "nonsense"
    first = operator.request("GET", "/v1/jobs?page_size=2")
    following = operator.session.get(
        first.json()["next"], headers={"Authorization": f"Token {operator.token}"}, timeout=30
    )
    of_workflow = operator.request("GET", f"/v1/workflows/{record.id}?cursor=%27")
    superscript = [operator.request("GET", f"{path}?page_size=%C2%B2") for path in ("/v1/queues", "/v1/jobs")]

    for refused in (quote, not_ours, of_workflow):
        assert "cursor" in problem(refused, 400)["errors"], refused.text
    assert following.status_code == 200 and len(following.json()["results"]) == 2  # 3 jobs and a member: 4
    for refused in superscript:  # "²".isdigit(): the queues' page was a 500
        assert "page_size" in problem(refused, 400)["errors"], refused.text
