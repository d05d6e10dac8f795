"""charges.services.create_charge: one charge per idempotency key, decided by the UNIQUE index."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection

from charges.models import Charge
from charges.services import Created, KeyReused, create_charge, fingerprint


def key() -> str:
    return f"test:{uuid.uuid4()}"


@pytest.mark.django_db
def test_a_new_key_creates_a_charge():
    k = key()
    result = create_charge(idempotency_key=k, amount=500, currency="EUR", description="order 1")
    assert result.created is True
    charge = Charge.objects.get(idempotency_key=k)
    assert charge == result.charge
    assert (charge.amount, charge.currency, charge.description) == (500, "EUR", "order 1")
    assert charge.request_fingerprint == fingerprint(amount=500, currency="EUR", description="order 1")


@pytest.mark.django_db
def test_the_same_key_and_request_return_the_original_charge():
    k = key()
    first = create_charge(idempotency_key=k, amount=500, currency="EUR")
    again = create_charge(idempotency_key=k, amount=500, currency="EUR")
    assert again.created is False
    assert again.charge.id == first.charge.id
    assert Charge.objects.filter(idempotency_key=k).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "other",
    [
        {"amount": 501, "currency": "EUR"},
        {"amount": 500, "currency": "USD"},
        {"amount": 500, "currency": "EUR", "description": "something else"},
    ],
    ids=["other-amount", "other-currency", "other-description"],
)
def test_the_same_key_with_another_request_raises_key_reused(other):
    k = key()
    original = create_charge(idempotency_key=k, amount=500, currency="EUR").charge
    with pytest.raises(KeyReused) as raised:
        create_charge(idempotency_key=k, **other)
    assert raised.value.original.id == original.id
    assert "already used for another request" in str(raised.value)
    assert Charge.objects.filter(idempotency_key=k).count() == 1
    assert Charge.objects.get(idempotency_key=k).amount == 500


@pytest.mark.django_db
def test_the_currency_is_compared_case_insensitively():
    k = key()
    first = create_charge(idempotency_key=k, amount=500, currency="eur")
    assert first.charge.currency == "EUR"
    again = create_charge(idempotency_key=k, amount=500, currency="EUR")
    assert (again.created, again.charge.id) == (False, first.charge.id)
    assert fingerprint(amount=500, currency="eUr", description="") == fingerprint(
        amount=500, currency="EUR", description=""
    )


@pytest.mark.django_db(transaction=True)
def test_sixteen_threads_with_one_key_make_one_charge_and_all_get_its_id():
    """Each thread has its own PostgreSQL connection; a barrier lines the INSERTs up."""
    k = key()
    n = 16
    barrier = threading.Barrier(n)
    results: list[Created] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def call() -> None:
        try:
            connection.ensure_connection()  # connect before the barrier, so the INSERTs race
            barrier.wait(timeout=30)
            result = create_charge(idempotency_key=k, amount=700, currency="EUR")
            with lock:
                results.append(result)
        except BaseException as exc:
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(results) == n
    assert Charge.objects.filter(idempotency_key=k).count() == 1
    charge = Charge.objects.get(idempotency_key=k)
    assert {r.charge.id for r in results} == {charge.id}
    assert sum(r.created for r in results) == 1
