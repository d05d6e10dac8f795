"""POST /v1/charges and GET /v1/charges/<id> as CONTRACT.md fixes them, through the Django test client."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from rest_framework.test import APIClient

from charges.models import Charge, ChargeRequest

pytestmark = pytest.mark.django_db

PROBLEM_JSON = "application/problem+json"
BODY = {"amount": 500, "currency": "EUR", "description": "order 7"}


@pytest.fixture
def client(api_token: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {api_token}")
    return c


def key() -> str:
    return f"test:{uuid.uuid4()}"


def post(client: APIClient, body: object, *, idempotency_key: str | None, content_type: str = "application/json"):
    headers = {} if idempotency_key is None else {"HTTP_IDEMPOTENCY_KEY": idempotency_key}
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post("/v1/charges", data=data, content_type=content_type, **headers)


@contextmanager
def logs_requests(n: int) -> Iterator[None]:
    """The block writes exactly n ChargeRequest rows (H)."""
    before = ChargeRequest.objects.count()
    yield
    assert ChargeRequest.objects.count() - before == n


def assert_problem(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith(PROBLEM_JSON)
    body = response.json()
    assert body["status"] == status
    assert body["title"] and body["type"].startswith("https://")
    return body


def test_a_new_key_answers_201_with_the_charge_and_its_location(client):
    k = key()
    with logs_requests(1):
        response = post(client, BODY, idempotency_key=k)
    assert response.status_code == 201, response.content
    body = response.json()
    charge = Charge.objects.get(idempotency_key=k)
    assert body["id"] == str(charge.id)
    assert (body["amount"], body["currency"], body["description"]) == (500, "EUR", "order 7")
    assert body["idempotency_key"] == k
    assert response["Location"] == f"/v1/charges/{charge.id}"
    assert ChargeRequest.objects.get().idempotency_key == k


def test_the_same_key_and_body_again_answers_200_with_the_same_charge(client):
    k = key()
    first = post(client, BODY, idempotency_key=k)
    with logs_requests(1):
        again = post(client, BODY, idempotency_key=k)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert Charge.objects.filter(idempotency_key=k).count() == 1
    assert ChargeRequest.objects.filter(idempotency_key=k).count() == 2


def test_the_same_key_with_another_body_answers_409_problem_saying_the_key_was_reused(client):
    k = key()
    assert post(client, BODY, idempotency_key=k).status_code == 201
    with logs_requests(1):
        response = post(client, {**BODY, "amount": 501}, idempotency_key=k)
    body = assert_problem(response, 409)
    assert "already used for another request" in body["detail"]
    assert k in body["detail"]
    assert Charge.objects.get(idempotency_key=k).amount == 500


def test_a_missing_idempotency_key_answers_400_and_charges_nothing(client):
    # Refused before anything is written: a keyless request is no run of a charge job.
    with logs_requests(0):
        response = post(client, BODY, idempotency_key=None)
    body = assert_problem(response, 400)
    assert "Idempotency-Key" in body["detail"]
    assert not Charge.objects.exists()


def test_an_idempotency_key_over_255_characters_answers_400(client):
    with logs_requests(0):
        response = post(client, BODY, idempotency_key="k" * 256)
    assert_problem(response, 400)
    assert not Charge.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": 0, "currency": "EUR"}, "amount"),
        ({"amount": -5, "currency": "EUR"}, "amount"),
        ({"amount": 5.0, "currency": "EUR"}, "amount"),
        ({"amount": 5.5, "currency": "EUR"}, "amount"),
        ({"amount": "500", "currency": "EUR"}, "amount"),
        ({"amount": True, "currency": "EUR"}, "amount"),
        ({"currency": "EUR"}, "amount"),
        ({"amount": 500}, "currency"),
        ({"amount": 500, "currency": "EURO"}, "currency"),
        ({"amount": 500, "currency": "E1R"}, "currency"),
        ({"amount": 500, "currency": "EUR", "tip": 10}, "tip"),
        ({"amount": None, "currency": "EUR"}, "amount"),
        ({"amount": 10**13, "currency": "EUR"}, "amount"),
        ({"amount": 500, "currency": "EUR", "description": None}, "description"),
        ({"amount": 500, "currency": "EUR", "description": "x" * 501}, "description"),
        ([500, "EUR"], None),
        (None, None),
        ("500 EUR", None),
    ],
    ids=[
        "zero",
        "negative",
        "float",
        "fraction",
        "string",
        "bool",
        "no-amount",
        "no-currency",
        "EURO",
        "digit-currency",
        "unknown-field",
        "null-amount",
        "huge-amount",
        "null-description",
        "long-description",
        "list",
        "null",
        "json-string",
    ],
)
def test_a_bad_body_answers_400_problem_naming_the_field_and_charges_nothing(client, body, field):
    with logs_requests(1):
        response = post(client, body, idempotency_key=key())
    problem = assert_problem(response, 400)
    if field is not None:
        assert field in problem["errors"], problem
    assert not Charge.objects.exists()


def test_a_body_that_is_not_json_answers_415(client):
    with logs_requests(1):
        response = post(
            client, b"amount=500&currency=EUR", idempotency_key=key(), content_type="application/x-www-form-urlencoded"
        )
    assert_problem(response, 415)
    assert not Charge.objects.exists()


def test_malformed_json_answers_400(client):
    with logs_requests(1):
        response = post(client, b'{"amount": 500,', idempotency_key=key())
    assert_problem(response, 400)
    assert not Charge.objects.exists()


def test_anonymous_requests_answer_401_and_never_reach_the_service():
    anonymous = APIClient()
    with logs_requests(0):
        response = post(anonymous, BODY, idempotency_key=key())
    assert_problem(response, 401)
    assert response["WWW-Authenticate"].startswith("Token")
    assert anonymous.get(f"/v1/charges/{uuid.uuid4()}").status_code == 401
    assert not Charge.objects.exists()


def test_get_a_charge_by_id_answers_200_with_the_charge(client):
    created = post(client, BODY, idempotency_key=key()).json()
    with logs_requests(0):
        response = client.get(f"/v1/charges/{created['id']}")
    assert response.status_code == 200
    assert response.json() == created


@pytest.mark.parametrize(
    "charge_id", [str(uuid.uuid4()), "not-a-uuid", "1234", "%20"], ids=["unknown-uuid", "word", "number", "space"]
)
def test_get_an_unknown_or_malformed_charge_id_answers_404_not_500(client, charge_id):
    response = client.get(f"/v1/charges/{charge_id}")
    assert_problem(response, 404)
