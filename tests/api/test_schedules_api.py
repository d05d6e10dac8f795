"""GET /v1/schedules: each schedule's name, kind, cron, zone, state and slots, to reliableq.view_schedule only."""

from __future__ import annotations

import datetime as dt

import pytest

from reliableq import schedules
from reliableq.models import Schedule

from .conftest import ALL_PERMS, problem_of
from .jobs import job_in

pytestmark = pytest.mark.django_db
URL = "/v1/schedules"


def make(name: str, **fields: object) -> Schedule:
    return schedules.save(Schedule(name=name, kind="demo.noop", cron="0 7 * * *", **fields))


def test_a_reader_gets_every_schedule_by_name_with_its_slots(make_client):
    make("b-reports", timezone="Europe/Paris")
    made = make("a-cleanup", enabled=False)
    Schedule.objects.filter(pk=made.pk).update(last_slot=dt.datetime(2030, 1, 1, 6, tzinfo=dt.timezone.utc))
    response = make_client("view_schedule").get(URL)
    assert response.status_code == 200
    listed = response.json()["schedules"]
    assert [s["name"] for s in listed] == ["a-cleanup", "b-reports"] and response.json()["next"] is None
    assert listed[0] == {
        "name": "a-cleanup", "kind": "demo.noop", "cron": "0 7 * * *", "timezone": "UTC", "enabled": False,
        "last_slot": "2030-01-01T06:00:00Z", "next_slot": None,
    }  # fmt: skip
    assert listed[1]["timezone"] == "Europe/Paris" and listed[1]["next_slot"].endswith(("T05:00:00Z", "T06:00:00Z"))


def test_pages_walk_every_schedule_once(make_client):
    for n in range(5):
        make(f"s{n}")
    client, seen, url = make_client("view_schedule"), [], f"{URL}?page_size=2"
    while url:
        body = client.get(url).json()
        seen += [s["name"] for s in body["schedules"]]
        url = body["next"]
    assert seen == ["s0", "s1", "s2", "s3", "s4"]


@pytest.mark.parametrize("query", ["page_size=0", "page_size=501", "page_size=x", "after=%00", "verbose=1"])
def test_a_bad_query_is_400(make_client, query):
    problem_of(make_client("view_schedule").get(f"{URL}?{query}"), 400)


def test_a_stranger_is_refused(make_client, anon):
    make("reports")
    problem_of(anon.get(URL), 401)
    for perms in ((), ALL_PERMS, ("view_job",)):
        body = problem_of(make_client(*perms).get(URL), 403)
        assert "reports" not in str(body) and "reliableq.view_schedule" in body["detail"]


def test_metrics_give_each_enabled_schedules_lag_and_whether_its_last_job_failed(api):
    from prometheus_client.parser import text_string_to_metric_families

    now = dt.datetime.now(dt.timezone.utc)
    failing, waiting, off = make("failing"), make("waiting"), make("off", enabled=False)
    dead = job_in("DEAD")  # its one attempt started just now
    Schedule.objects.filter(pk=failing.pk).update(last_slot=now - dt.timedelta(hours=4), last_job=dead.pk)
    pending = job_in("PENDING")  # not started: the lag counts from its slot
    Schedule.objects.filter(pk=waiting.pk).update(last_slot=now - dt.timedelta(seconds=90), last_job=pending.pk)
    Schedule.objects.filter(pk=off.pk).update(last_slot=now - dt.timedelta(days=9))

    response = api.get("/v1/metrics")

    families = text_string_to_metric_families(response.content.decode())
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    lag = {labels[0][1]: v for (name, labels), v in samples.items() if name == "reliableq_schedule_lag_seconds"}
    failed = {labels[0][1]: v for (name, labels), v in samples.items() if name == "reliableq_schedule_last_job_failed"}
    assert set(lag) == {"failing", "waiting"} and set(failed) == {"failing", "waiting"}  # not the disabled one
    assert lag["failing"] < 3600  # from its job's start, not its slot four hours ago
    assert 89 < lag["waiting"] < 150
    assert failed == {"failing": 1, "waiting": 0}
    assert samples[("reliableq_schedule_series_truncated", ())] == 0
