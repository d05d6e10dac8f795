"""Schemathesis against a live gunicorn: no 5xx, and every answer conforms to /v1/schema.

Every operation of the served document is fuzzed with positive data (fits the schema) and
negative data (does not), and the operations on one object once more with ids of jobs in every
status and of a real charge, so that the 200/202/409 answers are checked too, not only 404s.
Checks: not_a_server_error, response_schema_conformance, status_code_conformance,
content_type_conformance. Deterministic: Hypothesis is derandomized, with no example database.

schemathesis' pytest integration (schema.parametrize / from_fixture) does not run under
pytest 9.2 (it sets Function._nodeid), so the Hypothesis tests are driven here directly from
APIOperation.as_strategy, which is schemathesis' public API too.
"""

from __future__ import annotations

import time
from typing import Any

import hypothesis.errors
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup  # a BaseExceptionGroup, not an Exception
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from reliableq import registry
from reliableq.models import JobStatus

from .jobs import job_in

pytestmark = pytest.mark.slow

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]
MAX_EXAMPLES = 30
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,  # the same examples on every run
    database=None,  # and no memory of earlier runs' failures
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)
# Operations whose every input is an unconstrained string or absent: nothing to negate.
NOTHING_TO_NEGATE = {
    "GET /v1/jobs/{id}",
    "POST /v1/jobs/{id}/replay",
    "POST /v1/jobs/{id}/cancel",
    "GET /v1/workflows/{id}",
    "POST /v1/workflows/{id}/cancel",
    "GET /v1/stats",
    "GET /v1/queues",
    "POST /v1/queues/{name}/resume",
    "GET /v1/charges/{id}",
    "GET /v1/schema",
    "GET /v1/ready",
    "GET /v1/metrics",
}


def describe(exc: BaseException) -> str:
    """schemathesis' own report (each failure, the response, a curl to reproduce), or the error."""
    return "\n".join([str(exc) if isinstance(exc, FailureGroup) else repr(exc), *getattr(exc, "__notes__", [])])


def served_document(url: str) -> dict[str, Any]:
    """The served /v1/schema, with `kind` narrowed to the kinds that may be submitted over HTTP.

    Any string is a valid `kind` by the schema, so unnarrowed the fuzzer would almost never name
    a registered one and every submission would stop at the 400; narrowed, positive submissions
    reach the 202/200/409 answers and negative ones still send unknown kinds.
    """
    document = requests.get(url + "/v1/schema", timeout=10).json()
    submittable = sorted(k for k, h in registry._handlers.items() if h.http and not registry.is_task_kind(k))
    schemas = document["components"]["schemas"]
    schemas["JobSubmission"]["properties"]["kind"]["enum"] = submittable
    schemas["WorkflowMember"]["properties"]["kind"]["enum"] = submittable
    return document


def test_fuzzed_requests_get_no_5xx_and_only_answers_the_schema_documents(live_api):
    jobs = [str(job_in(status).id) for status in JobStatus.values for _ in range(2)]
    charge = requests.post(
        live_api.url + "/v1/charges",
        json={"amount": 500, "currency": "EUR"},
        headers={**live_api.headers, "Idempotency-Key": "fuzz-charge"},
        timeout=10,
    )
    assert charge.status_code == 201, charge.text
    made = requests.post(
        live_api.url + "/v1/workflows",
        json={"members": [{"name": "a", "kind": "demo.noop", "payload": {}},
                          {"name": "b", "kind": "demo.noop", "payload": {}, "after": ["a"]}]},
        headers=live_api.headers,
        timeout=10,
    )  # fmt: skip
    assert made.status_code == 202, made.text
    known_ids = {
        "/v1/jobs": jobs,
        "/v1/charges": [charge.json()["id"], *jobs[:2]],
        "/v1/workflows": [made.json()["id"], *jobs[:2]],
    }

    schema = schemathesis.openapi.from_dict(served_document(live_api.url))
    session = requests.Session()
    ran: dict[str, int] = {}
    failures: list[str] = []

    def fuzz(label: str, strategy: st.SearchStrategy[Any]) -> None:
        ran[label] = 0

        @SETTINGS
        @given(case=strategy)
        def run(case: Any) -> None:
            ran[label] += 1
            case.call_and_validate(
                base_url=live_api.url, headers=live_api.headers, checks=CHECKS, session=session, timeout=30
            )

        try:
            run()
        except hypothesis.errors.Unsatisfiable:
            if not label.endswith("[negative]") or label.removesuffix(" [negative]") not in NOTHING_TO_NEGATE:
                failures.append(f"{label}: no example could be generated")
        except (Exception, FailureGroup) as exc:  # every operation is fuzzed; all failures are reported together
            failures.append(f"{label}:\n{describe(exc)}")

    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(f"{operation.label} [{mode.value}]", operation.as_strategy(generation_mode=mode))
        if "{id}" in operation.path:
            ids = known_ids[operation.path.split("/{id}")[0]]

            def existing(i: str, op: Any = operation) -> st.SearchStrategy[Any]:
                return op.as_strategy(path_parameters={"id": i})

            fuzz(f"{operation.label} [existing ids]", st.sampled_from(ids).flatmap(existing))
    elapsed = time.monotonic() - started

    assert not failures, "\n\n".join(failures) + f"\n\n(gunicorn log: {live_api.output()[-3000:]})"
    print(f"fuzzed {sum(ran.values())} requests in {elapsed:.1f}s: {ran}")
    assert len([label for label in ran if label.endswith("[positive]")]) == 20, ran  # every operation of the document
    assert all(ran[label] > 0 for label in ran if not label.endswith("[negative]")), ran
    for label in ("POST /v1/jobs", "GET /v1/jobs", "POST /v1/charges"):
        assert ran[f"{label} [negative]"] >= MAX_EXAMPLES // 2, ran
