"""POST /v1/workflows, GET /v1/workflows/<id>, POST /v1/workflows/<id>/cancel: validated as a
whole (nothing made on any error, the failing members named), keyed per user, permissioned."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry

from reliableq.api import workflow_pages
from reliableq.models import Job, JobStatus, Workflow
from reliableq.testing import drain

from .conftest import SUBMIT, VIEW, problem_of

pytestmark = pytest.mark.django_db

URL = "/v1/workflows"


def body(n: int = 3, **extra: Any) -> dict[str, Any]:
    members = [{"name": "fetch", "kind": "wf.step", "payload": {}}]
    members += [{"name": f"load-{i}", "kind": "wf.step", "payload": {"i": i}, "after": ["fetch"]} for i in range(n)]
    members.append({"name": "report", "kind": "wf.step", "payload": {}, "after": [f"load-{i}" for i in range(n)],
                    "on_upstream_failure": "run"})  # fmt: skip
    return {"name": "import 42", "members": members,
            "callbacks": {"success": {"kind": "wf.callback", "payload": {"to": "ops"}}}, **extra}  # fmt: skip


def nothing_made() -> bool:
    return not Workflow.objects.exists() and not Job.objects.exists()


def test_a_workflow_is_accepted_whole_and_read_back(make_client):
    client = make_client(SUBMIT)
    response = client.post(URL, body(), format="json")
    assert response.status_code == 202, response.content
    doc = response.json()
    assert response["Location"] == f"/v1/workflows/{doc['id']}"
    assert doc["status"] == "RUNNING" and doc["name"] == "import 42" and doc["callbacks"] == []
    members = {m["name"]: m for m in doc["members"]}
    assert members["fetch"]["status"] == "PENDING" and members["report"]["status"] == "WAITING"
    assert sorted(members["report"]["after"]) == ["load-0", "load-1", "load-2"]
    assert Job.objects.filter(workflow_id=doc["id"]).count() == 5

    drain()
    doc = client.get(f"{URL}/{doc['id']}").json()  # its submitter reads it without view_job
    assert doc["status"] == "SUCCEEDED"
    assert {m["status"] for m in doc["members"]} == {"SUCCEEDED"}
    [callback] = doc["callbacks"]
    assert (callback["event"], callback["run"], callback["kind"]) == ("success", 1, "wf.callback")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda b: b["members"].append({"name": "fetch", "kind": "wf.step", "payload": {}}), "members[5]"),
        (lambda b: b["members"][1].update(after=["nobody"]), "members[1]"),
        (lambda b: b["members"][0].update(after=["report"]), "members[0]"),
        (lambda b: b["members"][2].update(payload=[]), "members[2].payload"),
        (lambda b: b["members"][3].pop("name"), "members[3].name"),
        (lambda b: b["members"][3].update(on_upstream_failure="maybe"), "members[3].on_upstream_failure"),
        (lambda b: b["members"][3].update(unique_key="k"), "members[3].unique_key"),
        (lambda b: b["members"][3].update(colour="red"), "members[3].colour"),
        (lambda b: b["callbacks"].update(sometimes={"kind": "wf.callback", "payload": {}}), "callbacks"),
        (lambda b: b.update(members=[]), "members"),
    ],
)
def test_a_bad_workflow_is_400_naming_its_members_and_makes_nothing(api, change, named):
    sent = body()
    change(sent)
    problem = problem_of(api.post(URL, sent, format="json"), 400)
    assert any(key.startswith(named) for key in problem["errors"]), problem
    assert nothing_made()


def test_the_answer_lists_the_members_in_the_order_submitted(api):
    # Issue 50: members were answered in id order, and ids made in one millisecond are in random order.
    sent = body(n=40)
    doc = api.post(URL, sent, format="json").json()
    assert [m["name"] for m in doc["members"]] == [m["name"] for m in sent["members"]]
    again = api.get(f"{URL}/{doc['id']}").json()
    assert [m["name"] for m in again["members"]] == [m["name"] for m in sent["members"]]


def test_a_repeated_member_name_is_named_in_a_sentence(api):
    sent = body()
    sent["members"].append({"name": "fetch", "kind": "wf.step", "payload": {}})
    problem = problem_of(api.post(URL, sent, format="json"), 400)
    # Before: "Members 5 repeat a name another member has."
    assert problem["errors"]["members[5]"] == [
        "Each member needs a name of its own: member 5 repeats 'fetch', the name of member 0."
    ], problem


def test_a_member_or_callback_of_a_kind_closed_to_http_is_403_and_makes_nothing(api):
    sent = body()
    sent["members"][2]["kind"] = "test.permanent"  # registered, not http=True
    problem = problem_of(api.post(URL, sent, format="json"), 403)
    assert "members[2].kind" in str(problem)
    sent = body()
    sent["callbacks"]["success"]["kind"] = "no.such.kind"
    problem_of(api.post(URL, sent, format="json"), 403)
    assert nothing_made()


def test_over_ten_thousand_members_is_413(api):
    sent = {"members": [{"name": f"m{i}", "kind": "wf.step", "payload": {}} for i in range(10_001)]}
    problem_of(api.post(URL, sent, format="json"), 413)
    assert nothing_made()


def test_an_idempotency_key_returns_the_same_workflow_and_is_scoped_to_the_user(make_client):
    alice, bob = make_client(SUBMIT), make_client(SUBMIT)
    first = alice.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="wf-1")
    again = alice.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="wf-1")
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    problem_of(alice.post(URL, body(n=4), format="json", HTTP_IDEMPOTENCY_KEY="wf-1"), 409)
    other = bob.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="wf-1")
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]
    assert Workflow.objects.count() == 2


def test_another_users_workflow_is_404_without_view_job(make_client):
    alice, bob, operator = make_client(SUBMIT), make_client(SUBMIT), make_client(VIEW)
    made = alice.post(URL, body(), format="json").json()
    problem_of(bob.get(f"{URL}/{made['id']}"), 404)
    problem_of(bob.get(f"{URL}/not-a-uuid"), 404)
    assert operator.get(f"{URL}/{made['id']}").status_code == 200


def test_cancel_needs_cancel_job_is_audited_and_is_409_once_finished(make_client, api):
    made = api.post(URL, body(), format="json").json()
    problem_of(make_client(VIEW).post(f"{URL}/{made['id']}/cancel"), 403)
    response = api.post(f"{URL}/{made['id']}/cancel")
    assert response.status_code == 200, response.content
    doc = response.json()
    assert doc["status"] == "CANCELLED" and doc["cancel_requested"]
    assert {m["status"] for m in doc["members"]} == {JobStatus.CANCELLED}
    assert LogEntry.objects.filter(object_id=made["id"], change_message__startswith="Cancelled the workflow").exists()
    problem_of(api.post(f"{URL}/{made['id']}/cancel"), 409)


def test_submitting_needs_submit_job_and_counts_every_member_against_the_bound(make_client, settings):
    problem_of(make_client(VIEW).post(URL, body(), format="json"), 403)
    settings.RELIABLEQ = {**settings.RELIABLEQ, "MAX_PENDING_PER_SUBMITTER": 8}
    client = make_client(SUBMIT)
    assert client.post(URL, body(n=3), format="json").status_code == 202  # 5 members
    problem_of(client.post(URL, body(n=3), format="json"), 429)  # 5 more would be 10 > 8, WAITING ones count
    assert Workflow.objects.count() == 1


def test_a_workflow_of_n_members_counts_n_against_the_submit_rate(settings, make_client):
    from django.core.cache import cache

    cache.clear()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"reliableq_submit": "6/d"}}
    client = make_client(SUBMIT)
    assert client.post(URL, body(n=3), format="json").status_code == 202  # 5 members: 5 of 6
    problem_of(client.post(URL, body(n=0), format="json"), 429)  # 2 more
    invalid = body(n=0)
    invalid["members"][0]["kind"] = 7
    other = make_client(SUBMIT)
    problem_of(other.post(URL, {"members": invalid["members"] * 3}, format="json"), 400)  # 6 invalid members
    problem_of(other.post(URL, body(n=0), format="json"), 429)  # ... counted 6 of 6
    never = make_client(SUBMIT).post(URL, {"members": invalid["members"] * 4}, format="json")
    assert "6/d" in problem_of(never, 413)["detail"] and "Retry-After" not in never  # 8 > 6: no window admits it
    cache.clear()


def dense(n: int) -> dict[str, Any]:
    names = [f"m{i:02d}" for i in range(n)]
    return {"members": [{"name": m, "kind": "wf.step", "payload": {}, "after": names[:i]} for i, m in enumerate(names)]}


def pages(client: Any, first: dict[str, Any]) -> list[dict[str, Any]]:
    """`first` and every page its `next` links lead to."""
    found = [first]
    while found[-1]["next"]:
        answer = client.get(found[-1]["next"])
        assert answer.status_code == 200, answer.content
        found.append(answer.json())
    return found


def test_a_page_stops_once_its_after_lists_reach_page_after_names(make_client, monkeypatch):
    """PAGE_AFTER lowered from 10,000 to 10: the same cut, on a graph of 20 members (190 names)."""
    monkeypatch.setattr(workflow_pages, "PAGE_AFTER", 10)
    client = make_client(SUBMIT)
    made = client.post(URL, dense(20), format="json")
    assert made.status_code == 202, made.content

    read = pages(client, made.json())

    by_id = [j.member_name for j in Job.objects.filter(workflow_id=made.json()["id"]).order_by("id")]
    assert [m["name"] for p in read for m in p["members"]] == by_id
    after = {m["name"]: m["after"] for p in read for m in p["members"]}
    assert after == {f"m{i:02d}": [n for n in by_id if n < f"m{i:02d}"] for i in range(20)}  # in id order too
    for page in read:
        listed = sum(len(m["after"]) for m in page["members"])
        assert listed <= 10 or len(page["members"]) == 1, page  # a member of 11 names or more: alone
    assert sum(len(p["members"]) == 1 for p in read) >= 9  # m11 to m19
    assert read[0]["callbacks"] == [] and all(p["id"] == made.json()["id"] for p in read)

    # A cut past the first chunk of in-degrees counted (64 members): a fan-out of 100, 80 names a page.
    monkeypatch.setattr(workflow_pages, "PAGE_AFTER", 80)
    fan = [{"name": "root", "kind": "wf.step", "payload": {}}]
    fan += [{"name": f"leaf-{i}", "kind": "wf.step", "payload": {}, "after": ["root"]} for i in range(99)]
    read = pages(client, client.post(URL, {"members": fan}, format="json").json())
    assert len(read) == 2 and sum(len(m["after"]) for m in read[0]["members"]) == 80  # (the root, by id, anywhere)
    assert sorted(m["name"] for p in read for m in p["members"]) == sorted(m["name"] for m in fan)


def test_a_workflows_page_size_and_cursor_are_checked_once_it_is_visible(make_client):
    owner, stranger = make_client(SUBMIT), make_client(SUBMIT)
    made = owner.post(URL, body(n=3), format="json").json()
    path = f"{URL}/{made['id']}"

    for query in ("page_size=0", "page_size=1001", "page_size=%C2%B2", "cursor=nope", "cursor=%27"):
        problem_of(owner.get(f"{path}?{query}"), 400)
    problem_of(owner.get(f"{path}?colour=red"), 400)
    problem_of(stranger.get(f"{path}?cursor=nope"), 404)  # the same answer as for no workflow at all
    one_by_one = pages(owner, owner.get(f"{path}?page_size=1").json())
    assert [len(p["members"]) for p in one_by_one] == [1] * 5
    assert sorted(m["name"] for p in one_by_one for m in p["members"]) == sorted(m["name"] for m in made["members"])
