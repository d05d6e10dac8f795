"""The charges admin at /admin/charges/charge/: read-only, searchable by idempotency key."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from charges.models import Charge

from .pages import body, form_controls, section, text

CHARGES = "/admin/charges/charge/"

pytestmark = pytest.mark.django_db


def charge(key: str, amount: int = 1200, description: str = "") -> Charge:
    return Charge.objects.create(
        idempotency_key=key, amount=amount, currency="EUR", description=description, request_fingerprint="ab" * 32
    )


def listed(response: object) -> list[str]:
    return re.findall(r'href="/admin/charges/charge/([0-9a-f-]{36})/change/', body(response))


def test_charges_list_shows_charges_and_offers_no_add(operator_client: Client) -> None:
    mine = charge("reliableq:charge:1", amount=4200, description="invoice 7")

    response = operator_client.get(CHARGES)

    assert response.status_code == 200
    assert listed(response) == [str(mine.pk)]
    row = text(section(body(response), 'id="result_list"', "</table>"))
    assert "reliableq:charge:1" in row and "4200" in row and "EUR" in row and "invoice 7" in row
    assert f"{CHARGES}add/" not in body(response)
    assert operator_client.get(f"{CHARGES}add/").status_code == 403


def test_charge_page_has_no_inputs_and_cannot_be_saved_or_deleted(operator_client: Client) -> None:
    mine = charge("reliableq:charge:2")
    url = f"{CHARGES}{mine.pk}/change/"

    response = operator_client.get(url)

    assert response.status_code == 200
    page = body(response)
    assert "<h1>View charge</h1>" in page
    assert form_controls(section(page, 'id="charge_form"', "</form>")) == []
    assert "_save" not in page and 'class="deletelink"' not in page
    assert operator_client.post(url, {"amount": "1", "currency": "USD"}).status_code == 403
    assert operator_client.post(f"{CHARGES}{mine.pk}/delete/", {"post": "yes"}).status_code == 403
    mine.refresh_from_db()
    assert (mine.amount, mine.currency) == (1200, "EUR")


def test_charges_are_searchable_by_exact_idempotency_key(operator_client: Client) -> None:
    wanted = charge("reliableq:charge:0b7c")
    charge("reliableq:charge:0b7c-other")
    charge("another-key")

    assert listed(operator_client.get(CHARGES, {"q": "reliableq:charge:0b7c"})) == [str(wanted.pk)]
    assert listed(operator_client.get(CHARGES, {"q": "0b7c"})) == []


def test_charges_admin_is_forbidden_without_view_charge(viewer_client: Client) -> None:
    charge("reliableq:charge:3")

    assert viewer_client.get(CHARGES).status_code == 403
