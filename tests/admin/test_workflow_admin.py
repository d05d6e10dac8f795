"""The workflow pages: a read-only list, a page that draws the members as a graph coloured by status
(each node a link to its job), cancel and replay behind a permission and a confirmation, a job's
link to its workflow, and the layout's depths (a pure function, tested without a database)."""

from __future__ import annotations

import datetime as dt
import html
import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.test.utils import CaptureQueriesContext

import reliableq
from reliableq.admin import graph
from reliableq.admin.common import STATUS_COLOURS
from reliableq.admin.workflow_page import MAX_DRAWN
from reliableq.models import Job, JobStatus, Workflow, WorkflowStatus
from reliableq.queue import db
from reliableq.testing import drain

from .conftest import client_for, make_staff
from .pages import body, form_controls, messages_of, rows, section, text

LIST = "/admin/reliableq/workflow/"
NODE = re.compile(
    r'<a class="rq-node" href="(?P<href>[^"]+)" data-member="(?P<name>[^"]+)" data-status="(?P<status>\w+)">'
    r"<title>(?P<title>[^<]*)</title><rect x=\"(?P<x>\d+)\" y=\"(?P<y>\d+)\"[^>]*fill=\"(?P<fill>#[0-9a-f]{6})\"/>"
)


def page_url(record: Workflow) -> str:
    return f"{LIST}{record.pk}/change/"


def job_url(job: Job) -> str:
    return f"/admin/reliableq/job/{job.pk}/change/"


def diamond(*, fail_load: bool = False, name: str = "import 42") -> Workflow:
    """fetch -> load-0..2 -> report, with the three callbacks; load-1 dies when `fail_load`."""
    wf = reliableq.workflow(name=name)
    fetch = wf.add("wf.step", {}, name="fetch")
    loads = [wf.add("wf.step", {"fail": fail_load and n == 1}, name=f"load-{n}", after=[fetch]) for n in range(3)]
    wf.add("wf.step", {}, name="report", after=loads)
    for event in ("success", "failure", "complete"):
        wf.on(event, "wf.callback", {"event": event})
    return wf.enqueue()


def member(record: Workflow, name: str) -> Job:
    return Job.objects.get(workflow=record, member_name=name)


def nodes(page: str) -> list[dict[str, str]]:
    svg = section(page, '<svg id="workflow-graph"', "</svg>")
    return [{k: html.unescape(v) for k, v in m.groupdict().items()} for m in NODE.finditer(svg)]


def audit_of(obj: Any) -> list[LogEntry]:
    content_type = ContentType.objects.get_for_model(type(obj))
    return list(LogEntry.objects.filter(content_type=content_type, object_id=str(obj.pk)))


# -- the layout: depth is the longest path from a root ------------------------------------------


def test_depths_of_a_chain_count_each_step() -> None:
    assert graph.depths("abcd", [("a", "b"), ("b", "c"), ("c", "d")]) == {"a": 0, "b": 1, "c": 2, "d": 3}


def test_depths_of_a_diamond_put_the_join_after_both_sides() -> None:
    edges = [("top", "left"), ("top", "right"), ("left", "bottom"), ("right", "bottom")]
    assert graph.depths(["top", "left", "right", "bottom"], edges) == {"top": 0, "left": 1, "right": 1, "bottom": 2}


def test_depths_of_a_fan_in_follow_the_longest_path_not_the_shortest() -> None:
    roots = [f"r{n}" for n in range(5)]
    edges = [(r, "join") for r in roots] + [("r0", "slow"), ("slow", "join")]
    found = graph.depths([*roots, "slow", "join"], edges)
    assert found == {**dict.fromkeys(roots, 0), "slow": 1, "join": 2}


def test_depths_ignore_edges_to_nodes_that_are_gone() -> None:
    assert graph.depths(["a", "b"], [("a", "b"), ("pruned", "b"), ("b", "pruned")]) == {"a": 0, "b": 1}


def test_draw_puts_a_column_per_depth_and_leaves_out_the_deepest_past_the_limit() -> None:
    depth = {"root": 0, "x-10": 1, "x-2": 1, "end": 2}
    edges = [("root", "x-10"), ("root", "x-2"), ("x-2", "end"), ("x-10", "end")]

    whole = graph.draw(depth, edges, order=graph.natural)
    cut = graph.draw(depth, edges, order=graph.natural, limit=3)

    placed = {box.key: (box.x, box.y) for box in whole.boxes}
    column = graph.NODE_WIDTH + graph.COLUMN_GAP
    assert placed["x-2"][0] == placed["x-10"][0] == placed["root"][0] + column == placed["end"][0] - column
    assert placed["x-2"][1] < placed["x-10"][1]  # natural order down a column: 2 before 10
    assert len(whole.lines) == 4 and whole.left_out == 0
    assert whole.width == 2 * graph.PADDING + 3 * graph.NODE_WIDTH + 2 * graph.COLUMN_GAP
    assert [box.key for box in cut.boxes] == ["root", "x-2", "x-10"] and cut.left_out == 1
    assert len(cut.lines) == 2  # only the edges between drawn nodes


def test_natural_order_compares_digit_runs_as_numbers() -> None:
    names = ["load-10", "load-2", "load-²", "load", "2x", "10x"]
    assert sorted(names, key=graph.natural) == ["2x", "10x", "load", "load-2", "load-10", "load-²"]


# -- the list -----------------------------------------------------------------------------------


def test_list_shows_each_workflow_with_its_status_and_offers_nothing_to_change(operator_client: Client) -> None:
    done = diamond(name="nightly import")
    drain()
    running = diamond(name="second import")

    response = operator_client.get(LIST)

    assert response.status_code == 200
    page = body(response)
    listed = {text(r["name_display"]): r for r in rows(page, 'id="result_list"')}
    assert set(listed) == {"nightly import", "second import"}
    assert text(listed["nightly import"]["status_display"]) == "SUCCEEDED"
    assert text(listed["second import"]["status_display"]) == "RUNNING"
    assert text(listed["second import"]["members"]) == "5"
    assert text(listed["second import"]["run"]) == "1"
    assert text(listed["second import"]["short_id"]) == str(running.pk)[-8:]
    assert f'href="{page_url(done)}"' in listed["nightly import"]["name_display"]
    assert text(listed["second import"]["finished_short"]) == "-"
    assert "action-checkbox" not in page and "addlink" not in page
    assert operator_client.get(f"{LIST}add/").status_code == 403
    assert operator_client.post(f"{LIST}{done.pk}/delete/", {"post": "yes"}).status_code == 403
    assert operator_client.post(page_url(done), {"name": "renamed"}).status_code == 403
    assert Workflow.objects.get(pk=done.pk).name == "nightly import"


def test_list_filters_by_status_and_searches_names_and_short_ids(operator_client: Client) -> None:
    done = diamond(name="nightly import")
    drain()
    running = diamond(name="reports of march")

    def names(url: str) -> set[str]:
        return {text(r["name_display"]) for r in rows(body(operator_client.get(url)), 'id="result_list"')}

    assert names(f"{LIST}?status__exact=SUCCEEDED") == {"nightly import"}
    assert names(f"{LIST}?q=MARCH") == {"reports of march"}
    assert names(f"{LIST}?q={str(done.pk)[-8:]}") == {"nightly import"}
    assert names(f"{LIST}?q={running.pk}") == {"reports of march"}
    assert operator_client.get(f"{LIST}?name__icontains=x").status_code == 400  # no lookups from the URL


@pytest.mark.parametrize("query", ["q=%00", "status__exact=%00"])
def test_nul_in_the_lists_query_is_a_400_not_a_500(operator_client: Client, query: str) -> None:
    assert operator_client.get(f"{LIST}?{query}").status_code == 400


def test_workflows_need_view_job(db: None) -> None:
    record = diamond()
    nobody = client_for(make_staff("nobody"))

    assert nobody.get(LIST).status_code == 403
    assert nobody.get(page_url(record)).status_code == 403


def test_a_list_page_of_100_workflows_costs_as_many_queries_as_a_page_of_3(operator_client: Client) -> None:
    def create(count: int, start: int) -> None:
        base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
        made = [Workflow(name=f"w{n}", members=3, created_at=base + dt.timedelta(seconds=n)) for n in range(count)]
        Workflow.objects.bulk_create(made[start:])

    def queries() -> int:
        with CaptureQueriesContext(db.connection()) as captured:
            response = operator_client.get(LIST)
        assert response.status_code == 200
        return len(captured)

    create(3, 0)
    few = queries()
    create(153, 3)
    many = queries()

    assert many == few <= 12
    assert len(rows(body(operator_client.get(LIST)), 'id="result_list"')) == 100


# -- a workflow's page: the graph, the table, the summary ---------------------------------------


def test_the_page_draws_one_node_per_member_coloured_by_status_linking_to_its_job(operator_client: Client) -> None:
    record = diamond(fail_load=True)
    drain()

    response = operator_client.get(page_url(record))

    assert response.status_code == 200
    page = body(response)
    drawn = {n["name"]: n for n in nodes(page)}
    assert sorted(drawn) == ["fetch", "load-0", "load-1", "load-2", "report"]
    for name, node in drawn.items():
        job = member(record, name)
        assert node["status"] == job.status
        assert node["href"] == job_url(job)
        assert node["fill"] == STATUS_COLOURS[job.status]
        assert node["title"] == f"{name}: {job.status}"
    assert drawn["load-1"]["status"] == "DEAD" and drawn["report"]["status"] == "CANCELLED"
    # Left to right by depth: fetch, then the three loads in one column, then report.
    x = {name: int(node["x"]) for name, node in drawn.items()}
    assert x["fetch"] < x["load-0"] == x["load-1"] == x["load-2"] < x["report"]
    assert [int(drawn[f"load-{n}"]["y"]) for n in range(3)] == sorted(int(drawn[f"load-{n}"]["y"]) for n in range(3))
    assert section(page, '<g class="rq-edges"', "</g>").count("<path ") == 6  # fetch to each load, each to report
    assert form_controls(section(page, 'id="workflow_form"', "</form>")) == []


def test_the_page_lists_the_members_in_a_table_and_sums_them_up(operator_client: Client) -> None:
    record = diamond(fail_load=True)
    drain()

    page = body(operator_client.get(page_url(record)))

    table = {text(r["member"]): r for r in rows(page, 'id="workflow-members"')}
    assert list(table) == ["fetch", "load-0", "load-1", "load-2", "report"]
    assert {name: text(r["status"]) for name, r in table.items()} == {
        "fetch": "SUCCEEDED", "load-0": "SUCCEEDED", "load-1": "DEAD", "load-2": "SUCCEEDED", "report": "CANCELLED",
    }  # fmt: skip
    assert [text(r["depth"]) for r in table.values()] == ["0", "1", "1", "1", "2"]
    assert f'href="{job_url(member(record, "report"))}"' in table["report"]["job"]
    assert [name for name, r in table.items() if "Replay" in r["actions"]] == ["load-1"]
    counts = section(page, '<div class="form-row field-member_counts', "</div>\n")
    assert text(counts).endswith("SUCCEEDED 3 DEAD 1 CANCELLED 1")
    assert f'/admin/reliableq/job/?workflow={record.pk}&amp;status__exact=DEAD"' in counts
    fired = text(section(page, '<div class="form-row field-callbacks_fired', "</div>\n"))
    assert "run 1 failure: wf.callback" in fired and "run 1 complete: wf.callback" in fired
    failure = Job.objects.get(workflow=record, dedupe_key=f"workflow:{record.pk}:1:failure")
    assert f'href="{job_url(failure)}"' in page
    assert "on complete: wf.callback, on failure: wf.callback, on success: wf.callback" in text(page)
    assert text(section(page, '<div class="form-row field-status_display', "</div>\n")).endswith("FAILED")


def test_a_large_workflow_draws_the_first_members_by_depth_and_says_how_many_are_left_out(
    operator_client: Client,
) -> None:
    wf = reliableq.workflow(name="wide")
    root = wf.add("wf.step", {}, name="root")
    for n in range(MAX_DRAWN + 49):
        wf.add("wf.step", {}, name=f"leaf-{n}", after=[root])
    record = wf.enqueue()

    with CaptureQueriesContext(db.connection()) as captured:
        page = body(operator_client.get(page_url(record)))

    drawn = nodes(page)
    assert len(drawn) == MAX_DRAWN
    assert drawn[0]["name"] == "root" and drawn[1]["name"] == "leaf-0" and drawn[-1]["name"] == f"leaf-{MAX_DRAWN - 2}"
    assert len(rows(page, 'id="workflow-members"')) == MAX_DRAWN
    left_out = text(section(page, 'id="members-left-out"', "</p>"))
    assert f"The first {MAX_DRAWN} of {MAX_DRAWN + 50} members by depth are drawn; 50 more are left out" in left_out
    assert f"/admin/reliableq/job/?workflow={record.pk}" in page
    assert len(captured) <= 15  # the same few reads whatever the size


def test_the_job_list_filters_a_workflows_jobs(operator_client: Client) -> None:
    record = diamond(fail_load=True)
    other = diamond(name="other")
    drain()

    page = body(operator_client.get(f"/admin/reliableq/job/?workflow={record.pk}&status__exact=DEAD"))
    listed = [text(r["short_id"]) for r in rows(page, 'id="result_list"')]

    assert listed == [str(member(record, "load-1").pk)[-8:]]
    everything = rows(body(operator_client.get(f"/admin/reliableq/job/?workflow={other.pk}")), 'id="result_list"')
    assert len(everything) == 5 + 2  # its members and its success and complete callbacks
    assert operator_client.get("/admin/reliableq/job/?workflow=not-an-id").status_code == 200


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_needs_the_cancel_permission(viewer_client: Client) -> None:
    record = diamond()
    url = f"{LIST}{record.pk}/cancel/"

    assert 'id="cancel-workflow"' not in body(viewer_client.get(page_url(record)))
    assert viewer_client.get(url).status_code == 403
    assert viewer_client.post(url, {"confirm": "yes"}).status_code == 403
    assert Workflow.objects.get(pk=record.pk).status == WorkflowStatus.RUNNING


def test_cancel_asks_first_then_cancels_the_members_and_says_so(operator_client: Client, operator: Any) -> None:
    record = diamond()
    url = f"{LIST}{record.pk}/cancel/"
    assert f'href="{url}"' in body(operator_client.get(page_url(record)))

    asked = operator_client.get(url)

    assert asked.status_code == 200
    page = body(asked)
    assert "Cancel workflow import 42?" in page
    assert text(section(page, '<p id="confirm-what">', "</p>")) == (
        "Workflow import 42 is RUNNING, run 1, with 5 member(s): 4 waiting, 1 pending, 0 running."
    )
    assert 'name="confirm" value="yes"' in page and 'value="Yes, cancel this workflow"' in page
    assert Workflow.objects.get(pk=record.pk).status == WorkflowStatus.RUNNING

    done = operator_client.post(url, {"confirm": "yes"}, follow=True)

    assert done.redirect_chain == [(page_url(record), 302)]
    assert messages_of(done) == ["Workflow import 42 cancelled."]
    record.refresh_from_db()
    assert record.status == WorkflowStatus.CANCELLED
    assert set(Job.objects.filter(workflow=record, member_name__isnull=False).values_list("status", flat=True)) == {
        JobStatus.CANCELLED
    }
    assert 'id="cancel-workflow"' not in body(done)
    (entry,) = audit_of(record)
    assert entry.user_id == operator.pk


def test_cancelling_a_finished_workflow_is_an_error_message_not_a_500(operator_client: Client) -> None:
    record = diamond()
    drain()

    response = operator_client.post(f"{LIST}{record.pk}/cancel/", {"confirm": "yes"}, follow=True)

    assert response.status_code == 200
    assert messages_of(response) == [f"Workflow {record.pk} is SUCCEEDED; nothing to cancel."]
    assert 'class="error"' in body(response)


# -- replay a dead member ----------------------------------------------------------------------


def test_replay_of_a_dead_member_from_the_page_starts_run_2(operator_client: Client, operator: Any) -> None:
    record = diamond(fail_load=True)
    drain()
    dead = member(record, "load-1")
    url = f"{LIST}{record.pk}/replay/{dead.pk}/"
    assert f'href="{url}"' in body(operator_client.get(page_url(record)))

    asked = operator_client.get(url)

    assert asked.status_code == 200
    what = text(section(body(asked), '<p id="confirm-what">', "</p>"))
    assert what.startswith("Member load-1 (wf.step, job ") and "is DEAD after 1 attempt(s)" in what
    assert "its last error: PermanentError: the payload asked this member to fail" in what
    assert member(record, "load-1").status == JobStatus.DEAD

    done = operator_client.post(url, {"confirm": "yes"}, follow=True)

    assert done.redirect_chain == [(page_url(record), 302)]
    assert messages_of(done) == ["Member load-1 replayed: it is PENDING again; the workflow is RUNNING (run 2)."]
    record.refresh_from_db()
    assert (record.status, record.run, record.finished_at) == (WorkflowStatus.RUNNING, 2, None)
    assert member(record, "load-1").status == JobStatus.PENDING
    assert member(record, "report").status == JobStatus.WAITING
    assert {n["name"]: n["status"] for n in nodes(body(done))}["report"] == "WAITING"
    (entry,) = audit_of(dead)
    assert entry.user_id == operator.pk


def test_replay_needs_the_replay_permission(viewer_client: Client) -> None:
    record = diamond(fail_load=True)
    drain()
    dead = member(record, "load-1")

    assert "replay-member" not in body(viewer_client.get(page_url(record)))
    assert viewer_client.post(f"{LIST}{record.pk}/replay/{dead.pk}/", {"confirm": "yes"}).status_code == 403
    assert member(record, "load-1").status == JobStatus.DEAD


def test_replay_of_a_member_that_is_not_dead_or_not_in_the_workflow_is_an_error_message(
    operator_client: Client,
) -> None:
    record = diamond(fail_load=True)
    other = diamond(name="other", fail_load=True)
    drain()
    fine = member(record, "load-0")
    stranger = member(other, "load-1")

    refused = operator_client.post(f"{LIST}{record.pk}/replay/{fine.pk}/", {"confirm": "yes"}, follow=True)
    foreign = operator_client.post(f"{LIST}{record.pk}/replay/{stranger.pk}/", {"confirm": "yes"}, follow=True)

    assert refused.status_code == foreign.status_code == 200
    assert messages_of(refused) == [f"Job {fine.pk} is SUCCEEDED; this needs a DEAD job."]
    assert messages_of(foreign) == [f"Job {stranger.pk} is not a member of this workflow."]
    assert member(other, "load-1").status == JobStatus.DEAD
    assert Workflow.objects.get(pk=record.pk).run == 1


# -- a job's page links its workflow -----------------------------------------------------------


def test_a_members_and_a_callbacks_pages_link_their_workflow(operator_client: Client) -> None:
    record = diamond(fail_load=True)
    drain()
    failure = Job.objects.get(workflow=record, dedupe_key=f"workflow:{record.pk}:1:failure")
    alone = reliableq.enqueue("demo.noop", {})

    member_page = body(operator_client.get(job_url(member(record, "load-1"))))
    callback_page = body(operator_client.get(job_url(failure)))
    alone_page = body(operator_client.get(job_url(alone)))

    link = f'<a href="{page_url(record)}" id="job-workflow">import 42</a>'
    assert link in member_page and link in callback_page
    assert "Member load-1 of workflow import 42" in text(section(member_page, "field-workflow_link", "</div>"))
    assert "Callback failure (run 1) of workflow import 42" in text(
        section(callback_page, "field-workflow_link", "</div>")
    )
    assert "field-workflow_link" not in alone_page
