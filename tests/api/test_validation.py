"""Bad requests get problem+json 4xx answers that name the field, and never a 500.

The test client re-raises any exception a view lets escape, so a 500 fails these tests loudly.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from reliableq import registry
from reliableq.models import Job

from .conftest import problem_of

pytestmark = pytest.mark.django_db

GOOD = {"kind": "demo.noop", "payload": {"n": 1}}


def post_raw(api, body: str | bytes, content_type: str = "application/json", **headers: str):
    return api.generic("POST", "/v1/jobs", body, content_type=content_type, **headers)


def invalid(response, *fields: str) -> dict[str, Any]:
    """A 400 problem whose `errors` names exactly these fields; nothing was stored."""
    body = problem_of(response, 400)
    assert body["type"].endswith("/invalid"), body
    assert set(body["errors"]) == set(fields), body
    for field in fields:
        assert field in body["detail"], body
    assert Job.objects.count() == 0
    return body


# -- kind and payload ------------------------------------------------------------------------


def test_unknown_kind_is_400_naming_only_the_kind_asked_for(api):
    body = invalid(api.post("/v1/jobs", {"kind": "no.such.kind", "payload": {}}, format="json"), "kind")
    assert "no.such.kind" in body["errors"]["kind"][0]
    for other in registry.kinds():
        assert other not in body["detail"], f"the 400 reveals the registered kind {other!r}"


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"payload": {}}, {"kind"}),
        ({"kind": "demo.noop"}, {"payload"}),
        ({}, {"kind", "payload"}),
        ({"kind": "", "payload": {}}, {"kind"}),
        ({"kind": None, "payload": {}}, {"kind"}),
        ({"kind": "x" * 201, "payload": {}}, {"kind"}),
    ],
    ids=["no-kind", "no-payload", "empty", "blank-kind", "null-kind", "long-kind"],
)
def test_missing_or_blank_kind_and_payload_are_400_naming_them(api, body, fields):
    invalid(api.post("/v1/jobs", body, format="json"), *fields)


@pytest.mark.parametrize("payload", [[1, 2], "text", None, 5, True, []], ids=repr)
def test_payload_that_is_not_an_object_is_400_naming_payload(api, payload):
    invalid(api.post("/v1/jobs", {"kind": "demo.noop", "payload": payload}, format="json"), "payload")


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": "x\\u0000y"}',
        '{"a\\u0000": 1}',
        '{"a": ["fine", {"deep": "\\u0000"}]}',
        '{"a": "\\ud800"}',
        '{"a": 1e400}',
    ],
    ids=["nul-value", "nul-key", "nested-nul", "lone-surrogate", "infinite-number"],
)
def test_payload_that_postgresql_cannot_store_is_400_not_503(api, raw):
    """Valid JSON that jsonb refuses: answered as a bad payload, not as "unavailable, try again"."""
    invalid(post_raw(api, f'{{"kind": "demo.noop", "payload": {raw}}}'), "payload")


def test_unknown_field_named_with_a_lone_surrogate_is_400_not_500(api):
    body = invalid(post_raw(api, '{"kind": "demo.noop", "payload": {}, "\\ud800x": 1}'), "\\ud800x")
    assert body["errors"]["\\ud800x"] == ["Unknown field."]


@override_settings(RELIABLEQ={**settings.RELIABLEQ, "MAX_PAYLOAD_BYTES": 100})
def test_payload_over_max_payload_bytes_is_413_and_exactly_at_the_limit_is_accepted(api):
    at_limit = {"x": "a" * 92}  # {"x":"aaa..."} is 100 bytes of compact JSON
    assert len(json.dumps(at_limit, separators=(",", ":"))) == 100

    accepted = api.post("/v1/jobs", {"kind": "demo.noop", "payload": at_limit}, format="json")
    refused = api.post("/v1/jobs", {"kind": "demo.noop", "payload": {"x": "a" * 93}}, format="json")

    assert accepted.status_code == 202, accepted.content
    body = problem_of(refused, 413)
    assert "101 bytes" in body["detail"] and "100" in body["detail"]
    assert Job.objects.count() == 1


@override_settings(RELIABLEQ={**settings.RELIABLEQ, "MAX_PAYLOAD_BYTES": 100})
def test_payload_size_counts_utf8_bytes_not_characters(api):
    refused = api.post("/v1/jobs", {"kind": "demo.noop", "payload": {"x": "é" * 40}}, format="json")
    problem_of(refused, 413)  # 40 characters, but 40 x 6 bytes as \u00e9 escapes


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_body_over_the_servers_upload_limit_is_413_problem_not_an_html_400(api):
    response = api.post("/v1/jobs", {"kind": "demo.noop", "payload": {"x": "a" * 2000}}, format="json")

    problem_of(response, 413)
    assert Job.objects.count() == 0


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_charge_body_over_the_servers_upload_limit_is_413_problem(api):
    response = api.post(
        "/v1/charges",
        {"amount": 1, "currency": "EUR", "description": "d" * 2000},
        format="json",
        HTTP_IDEMPOTENCY_KEY="big",
    )
    problem_of(response, 413)


# -- the body as a whole ---------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
def test_body_that_is_not_json_is_415_problem(api, content_type):
    body = problem_of(post_raw(api, json.dumps(GOOD), content_type=content_type), 415)
    assert content_type in body["detail"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "raw",
    ['{"kind": "demo.noop", "payload": {}', "{'kind': 'demo.noop'}", "nope", '{"a": NaN}'],
    ids=["truncated", "single-quotes", "bare-word", "nan"],
)
def test_malformed_json_is_400_problem(api, raw):
    body = problem_of(post_raw(api, raw), 400)
    assert "JSON parse error" in body["detail"]
    assert Job.objects.count() == 0


def test_json_nested_past_the_recursion_limit_is_400_not_500(api):
    body = problem_of(post_raw(api, '{"kind": "demo.noop", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}"), 400)
    assert "nested too deeply" in body["detail"]


def test_json_body_that_is_not_an_object_is_400(api):
    invalid(post_raw(api, json.dumps([GOOD])), "non_field_errors")


def test_empty_json_body_is_400_naming_the_required_fields(api):
    invalid(post_raw(api, ""), "kind", "payload")


def test_unknown_fields_are_400_naming_each_of_them(api):
    body = invalid(api.post("/v1/jobs", {**GOOD, "status": "SUCCEEDED", "id": "x"}, format="json"), "status", "id")
    assert body["errors"]["status"] == ["Unknown field."]


# -- priority, max_attempts, run_at, queue ---------------------------------------------------


@pytest.mark.parametrize("value", [1001, -1, -1001, "5", 5.5, 5.0, True, None, [5]], ids=repr)
def test_priority_out_of_range_or_not_an_integer_is_400(api, value):
    invalid(api.post("/v1/jobs", {**GOOD, "priority": value}, format="json"), "priority")


@pytest.mark.parametrize("value", [0, -1, 101, "5", 5.5, True, False], ids=repr)
def test_max_attempts_out_of_range_or_not_an_integer_is_400(api, value):
    invalid(api.post("/v1/jobs", {**GOOD, "max_attempts": value}, format="json"), "max_attempts")


@pytest.mark.parametrize(("priority", "max_attempts"), [(0, 1), (1000, 100), (0, None)])
def test_priority_and_max_attempts_at_their_bounds_are_accepted(api, priority, max_attempts):
    response = api.post("/v1/jobs", {**GOOD, "priority": priority, "max_attempts": max_attempts}, format="json")
    assert response.status_code == 202, response.content


@pytest.mark.parametrize(
    "value",
    [
        "2030-01-01T12:00:00",  # naive: refused, not guessed
        "2030-01-01 12:00",
        "tomorrow",
        "2030-13-01T00:00:00Z",
        "2030-02-30T00:00:00Z",
        "",
        1893456000,
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
    ],
    ids=repr,
)
def test_naive_unparsable_or_out_of_range_run_at_is_400(api, value):
    invalid(api.post("/v1/jobs", {**GOOD, "run_at": value}, format="json"), "run_at")


def test_naive_run_at_is_refused_with_a_message_that_says_why(api):
    body = invalid(api.post("/v1/jobs", {**GOOD, "run_at": "2030-01-01T12:00:00"}, format="json"), "run_at")
    assert "UTC offset" in body["errors"]["run_at"][0]


@pytest.mark.parametrize("value", ["", "has space", "x" * 101, "ünïcode", "a/b", "a\nb", None, ["q"]], ids=repr)
def test_bad_queue_names_are_400(api, value):
    invalid(api.post("/v1/jobs", {**GOOD, "queue": value}, format="json"), "queue")


@pytest.mark.parametrize("key", ["k" * 256, "k\x00"], ids=["too-long", "nul"])
def test_bad_idempotency_key_is_400_naming_the_header(api, key):
    invalid(api.post("/v1/jobs", GOOD, format="json", HTTP_IDEMPOTENCY_KEY=key), "Idempotency-Key")


# -- list filters ----------------------------------------------------------------------------


def crafted_cursor(raw: str) -> str:
    return base64.b64encode(raw.encode()).decode()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "NOPE"}, "status"),
        ({"status": "pending"}, "status"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "-1"}, "page_size"),
        ({"page_size": "501"}, "page_size"),
        ({"page_size": "ten"}, "page_size"),
        ({"queue": "bad queue"}, "queue"),
        ({"kind": "k" * 201}, "kind"),
        ({"kind": "a\x00b"}, "kind"),
        ({"cursor": "garbage"}, "cursor"),
        ({"cursor": crafted_cursor("p=not-a-time")}, "cursor"),
        ({"cursor": crafted_cursor("p=2030-01-01 00:00:00")}, "cursor"),  # naive position
        ({"cursor": crafted_cursor("p=2030-02-30 00:00:00+00:00")}, "cursor"),
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, dict) else v,
)
def test_bad_list_filters_are_400_naming_the_parameter(api, params, field):
    body = problem_of(api.get("/v1/jobs", params), 400)
    assert set(body["errors"]) == {field}, body


def test_unknown_query_parameters_are_400_naming_them(api):
    body = invalid(api.get("/v1/jobs", {"colour": "blue", "payload__ssn": "x"}), "colour", "payload__ssn")
    assert "Unknown query parameter" in body["errors"]["colour"][0]


# -- malformed ids ---------------------------------------------------------------------------


BAD_IDS = ["nope", "1234", "00000000-0000-0000-0000-00000000000g", "00000000000000000000000000000000000", "%20"]


@pytest.mark.parametrize("bad_id", BAD_IDS)
@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("get", "/v1/jobs/{}"),
        ("post", "/v1/jobs/{}/replay"),
        ("post", "/v1/jobs/{}/cancel"),
        ("get", "/v1/charges/{}"),
    ],
)
def test_malformed_ids_are_404_problem_not_500(api, method, template, bad_id):
    problem_of(getattr(api, method)(template.format(bad_id)), 404)


def test_a_uuid_without_dashes_still_finds_the_job(api):
    job_id = api.post("/v1/jobs", GOOD, format="json").json()["id"]
    assert api.get(f"/v1/jobs/{job_id.replace('-', '')}").json()["id"] == job_id


# -- charges: the fixes to its view ----------------------------------------------------------


def test_charge_with_a_nul_in_its_idempotency_key_is_400_not_500(api):
    response = api.post("/v1/charges", {"amount": 100, "currency": "EUR"}, format="json", HTTP_IDEMPOTENCY_KEY="k\x00")
    body = problem_of(response, 400)
    assert "NUL" in body["detail"]
