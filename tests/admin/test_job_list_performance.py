"""The job list stays fast on a big table: bounded queries, no full COUNT(*), an index for each filter."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.test.utils import CaptureQueriesContext

from reliableq.admin import paging as admin_paging
from reliableq.admin.paging import CappedCountPaginator
from reliableq.models import Job, JobStatus
from reliableq.queue import db

from .pages import body, listed_ids

LIST = "/admin/reliableq/job/"
MAX_QUERIES = 12
STATUSES = [JobStatus.PENDING, JobStatus.SUCCEEDED, JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED]
# Every way an operator opens the list: plain, filtered, searched, and with the "counts" switch forced on.
URLS = [
    LIST,
    LIST + "?status__exact=DEAD",
    LIST + "?kind=test.flaky&queue=emails",
    LIST + "?lease=expired",
    LIST + "?q=test.flaky",
    LIST + "?waiting_for=*",
    LIST + "?waiting_for=order-1-paid",
    LIST + "?_facets=1",
    LIST + "?status__exact=DEAD&_facets=1",
]

pytestmark = pytest.mark.django_db


def bulk_jobs(count: int, *, start: int = 0, statuses: list[str] = STATUSES) -> None:
    """`count` jobs in two queues and two kinds, statuses in turn, one second apart, in a few INSERTs."""
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    Job.objects.bulk_create(
        [
            Job(
                kind="test.flaky" if n % 3 else "demo.noop",
                queue="emails" if n % 2 else "default",
                status=statuses[n % len(statuses)],
                attempts=1,
                max_attempts=5,
                payload={"n": n},
                last_error="boom" if statuses[n % len(statuses)] == JobStatus.DEAD else "",
                created_at=base + dt.timedelta(seconds=n),
            )
            for n in range(start, start + count)
        ],
        batch_size=1000,
    )


def page_queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(db.connection()) as captured:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return [q["sql"] for q in captured.captured_queries]


def unbounded_counts(queries: list[str]) -> list[str]:
    """COUNT queries over reliableq_job with no LIMIT: each one reads the whole (filtered) table."""
    return [
        sql
        for sql in queries
        if re.search(r"\bCOUNT\(", sql, re.I) and '"reliableq_job"' in sql and not re.search(r"\bLIMIT\b", sql, re.I)
    ]


def test_job_list_runs_the_same_bounded_number_of_queries_with_300_and_3000_jobs(operator_client: Client) -> None:
    bulk_jobs(300)
    small = {url: page_queries(operator_client, url) for url in URLS}
    bulk_jobs(2700, start=300)
    assert Job.objects.count() == 3000
    big = {url: page_queries(operator_client, url) for url in URLS}

    for url in URLS:
        assert len(small[url]) <= MAX_QUERIES, (url, len(small[url]), small[url])
        assert len(big[url]) == len(small[url]), (url, len(small[url]), len(big[url]), big[url])


def test_job_list_never_counts_the_whole_table(operator_client: Client) -> None:
    bulk_jobs(300)

    for url in URLS:
        queries = page_queries(operator_client, url)
        assert unbounded_counts(queries) == [], url
        counts = [sql for sql in queries if re.search(r"\bCOUNT\(", sql, re.I)]
        # The capped paginator's count: SELECT COUNT(*) FROM (SELECT ... LIMIT 10001) subquery.
        assert len(counts) == 1, (url, counts)
        assert re.search(rf"\bLIMIT {admin_paging.CAP + 1}\b", counts[0]), counts[0]


def test_job_list_does_not_offer_per_filter_counts(operator_client: Client) -> None:
    """Django's "Show counts" link would count the whole table once per filter option."""
    bulk_jobs(10)

    assert "_facets" not in body(operator_client.get(LIST))


def test_capped_paginator_counts_at_most_cap_plus_one_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    bulk_jobs(300)
    monkeypatch.setattr(admin_paging, "CAP", 100)

    paginator = CappedCountPaginator(Job.objects.order_by("-created_at"), 50)

    assert paginator.count == 101
    assert paginator.capped
    assert CappedCountPaginator(Job.objects.filter(status=JobStatus.DEAD), 50).count == 60
    assert not CappedCountPaginator(Job.objects.filter(status=JobStatus.DEAD), 50).capped


def test_dead_jobs_list_query_uses_the_settled_created_index(operator_client: Client) -> None:
    # As in production, DEAD jobs are a small share of the table: 1 in 50 here, 60 of 3000.
    bulk_jobs(3000, statuses=[JobStatus.SUCCEEDED] * 49 + [JobStatus.DEAD])
    with db.cursor() as cursor:
        cursor.execute("ANALYZE reliableq_job")
        cursor.execute("SET LOCAL enable_seqscan = off")  # inside the test's transaction only

    with CaptureQueriesContext(db.connection()) as captured:
        response = operator_client.get(LIST, {"status__exact": "DEAD"})
    assert response.status_code == 200
    assert len(listed_ids(response)) == 50  # one page of the 60 DEAD jobs, newest first
    main = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith('SELECT "reliableq_job"."id"') and "ORDER BY" in q["sql"]
    ]
    assert len(main) == 1, [q["sql"] for q in captured.captured_queries]
    assert """"reliableq_job"."status" = 'DEAD'""" in main[0]
    assert re.search(r'ORDER BY "reliableq_job"."created_at" DESC', main[0]), main[0]

    with db.cursor() as cursor:
        cursor.execute("EXPLAIN " + main[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "reliableq_job_settled_created" in plan, plan
