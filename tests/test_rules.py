"""The rule engine on extracted facts: exact decimals, every rule kind, and
the verdict order (fail beats review beats pass)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from quire.validator.facts import DocumentFacts, extract_facts
from quire.validator.rules import evaluate, verdict
from quire.validator.rulesets import DEFAULT_DIRECTORY, load_directory

RULESETS = {r.key: r for r in load_directory(DEFAULT_DIRECTORY)}
LEASE = RULESETS["lease-renewal@1"]
INVOICE = RULESETS["logistics-invoice@1"]


def invoice(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "invoice_number": "INV-1",
        "currency": "EUR",
        "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
        "lines": [
            {"description": "freight", "quantity": "3", "unit_price": "0.10"},
            {"description": "handling", "quantity": "1", "unit_price": "19.99"},
        ],
        "tax_rate": "19",
        "total": "24.15",
    }
    body.update(changes)
    return body


def facts(body: dict[str, object]) -> DocumentFacts:
    data = json.loads(json.dumps(body), parse_float=Decimal, parse_int=Decimal)
    return DocumentFacts(0, "application/json", data=data)


def test_the_shipped_rulesets_load_with_stable_digests() -> None:
    assert {"default@1", "lease-renewal@1", "logistics-invoice@1"} <= set(RULESETS)
    again = {r.key: r.digest for r in load_directory(DEFAULT_DIRECTORY)}
    assert all(again[key] == r.digest for key, r in RULESETS.items())


def test_a_correct_invoice_passes_with_exact_decimals() -> None:
    # 3 × 0.10 is exactly 0.30 here; in floats it is 0.30000000000000004.
    assert verdict(evaluate(INVOICE, [facts(invoice())])) == ("PASSED", "")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"total": "24.16"}, "TOTAL_MISMATCH"),
        ({"currency": "XYZ"}, "CURRENCY_INVALID"),
        ({"seller": {"name": "x", "tax_id": "123"}}, "TAX_ID_INVALID"),
        (
            {"lines": [{"description": "x", "quantity": "0", "unit_price": "1"}], "total": "0"},
            "QUANTITY_INVALID",
        ),
        ({"lines": []}, "SCHEMA_INVALID"),
        ({"total": None}, "SCHEMA_INVALID"),
        ({"total": "1e30"}, "SCHEMA_INVALID"),
        ({"total": "1e999999"}, "SCHEMA_INVALID"),
        ({"tax_rate": "20%"}, "SCHEMA_INVALID"),
        ({"total": "24.149"}, "TOTAL_MISMATCH"),
        (
            {"lines": [{"description": "x", "quantity": "1e30", "unit_price": "1"}]},
            "QUANTITY_INVALID",
        ),
    ],
)
def test_a_wrong_invoice_fails_with_its_reason(changes: dict[str, object], reason: str) -> None:
    assert verdict(evaluate(INVOICE, [facts(invoice(**changes))])) == ("REJECTED", reason)


def test_a_large_invoice_needs_review() -> None:
    big = invoice(
        lines=[{"description": "charter", "quantity": "1", "unit_price": "20000.00"}],
        total="23800.00",
    )
    assert verdict(evaluate(INVOICE, [facts(big)])) == ("NEEDS_REVIEW", "REVIEW_REQUIRED")


def lease_facts(text: str, **fields: str) -> DocumentFacts:
    return DocumentFacts(0, "application/pdf", text=text, fields=fields)


CLAUSES = (
    "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint disclosure attached."
)
SIGNED = {
    "property_address": "1 Main St",
    "tenant_signature": "A. Tenant",
    "landlord_signature": "B. Landlord",
}


def test_a_complete_lease_renewal_passes() -> None:
    assert verdict(evaluate(LEASE, [lease_facts(CLAUSES, **SIGNED)])) == ("PASSED", "")


def test_a_missing_clause_or_field_fails_and_a_soft_rule_asks_for_review() -> None:
    no_rent = CLAUSES.replace("Monthly rent", "Rent")
    assert verdict(evaluate(LEASE, [lease_facts(no_rent, **SIGNED)])) == (
        "REJECTED",
        "REQUIRED_CLAUSE_MISSING",
    )
    unsigned = dict(SIGNED, tenant_signature="  ")
    assert verdict(evaluate(LEASE, [lease_facts(CLAUSES, **unsigned)])) == (
        "REJECTED",
        "REQUIRED_FIELD_MISSING",
    )
    no_landlord = {k: v for k, v in SIGNED.items() if k != "landlord_signature"}
    assert verdict(evaluate(LEASE, [lease_facts(CLAUSES, **no_landlord)])) == (
        "NEEDS_REVIEW",
        "REVIEW_REQUIRED",
    )


def test_decisions_carry_no_document_text() -> None:
    decisions = evaluate(LEASE, [lease_facts("secret words " + CLAUSES, **SIGNED)])
    assert all("secret" not in d.detail and "Main St" not in d.detail for d in decisions)


def test_facts_come_from_a_real_pdf_form(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from quire.testing.pdfs import write_form_pdf

    path = write_form_pdf(tmp_path / "lease.pdf", [CLAUSES], SIGNED)
    extracted = extract_facts(str(path), 0, "application/pdf")
    assert extracted.fields == SIGNED
    assert "renewal term" in extracted.text.lower()
    assert verdict(evaluate(LEASE, [extracted])) == ("PASSED", "")


def test_half_cents_round_up_as_on_paper() -> None:
    half = invoice(
        lines=[{"description": "x", "quantity": "1", "unit_price": "0.125"}],
        tax_rate="0",
        total="0.13",
    )
    assert verdict(evaluate(INVOICE, [facts(half)])) == ("PASSED", "")
