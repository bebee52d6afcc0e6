"""What a reviewer is shown of a parked job (issue 41), computed as the
sandbox worker computes it: each decision with the values behind it (a
required clause missing: expected the clause, found nothing; an invoice:
the recomputed total against the stated one), a page drawn as a PNG of the
width asked for, and the request checks in front of both (width, page, the
ListReviews filters). The sandbox, the sealed blobs and the API around them
are tests/test_review_console.py's, on a running stack."""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from pathlib import Path

import pytest

from quire.errors import InvalidInput
from quire.testing.pdfs import text_pdf, write_form_pdf, write_text_pdf
from quire.validator.explaining import MAX_VALUE_CHARS, Explained, explain
from quire.validator.pageimages import render_page
from quire.validator.reviewfilters import ReviewFilter
from quire.validator.reviewinspector import checked_width
from quire.validator.rulesets import DEFAULT_DIRECTORY, Ruleset, load_directory

PDF = "application/pdf"
JSON = "application/json"
CLAUSES = "The renewal term is twelve months. Monthly rent: 1,200."
"""No lead-based paint clause: the lease-renewal ruleset asks for review."""
UNSIGNED = {"property_address": "1 Main St", "tenant_signature": "A. Tenant"}
"""No landlord signature: review too."""


def _shipped(name: str) -> Ruleset:
    (ruleset,) = [r for r in load_directory(DEFAULT_DIRECTORY) if r.name == name]
    return ruleset


def _by_rule(findings: list[Explained]) -> dict[str, Explained]:
    return {finding.rule: finding for finding in findings}


def _invoice(path: Path, total: str, unit_price: str = "0.10") -> Path:
    body = {
        "invoice_number": "INV-1",
        "currency": "EUR",
        "seller": {"name": "Carrier GmbH", "tax_id": "DE123456789"},
        "lines": [{"description": "freight", "quantity": "3", "unit_price": unit_price}],
        "tax_rate": "0",
        "total": total,
    }
    path.write_text(json.dumps(body))
    return path


def test_a_missing_clause_expects_the_clause_and_finds_nothing(tmp_path: Path) -> None:
    lease = write_form_pdf(tmp_path / "lease.pdf", [CLAUSES], UNSIGNED)
    found = _by_rule(explain([(str(lease), 0, PDF)], _shipped("lease-renewal")))
    clause = found["lead-paint-disclosure"]
    assert (clause.outcome, clause.reason_code) == ("review", "REVIEW_REQUIRED")
    assert (clause.subject, clause.expected, clause.found) == (
        "clause:lead-paint-disclosure",
        "lead-based paint",
        "",
    )
    present = found["renewal-term"]
    assert (present.outcome, present.expected, present.found) == (
        "pass",
        "renewal term",
        "renewal term",
    )
    signer = found["landlord-signer"]
    assert (signer.subject, signer.found, signer.outcome) == (
        "field:landlord_signature",
        "",
        "review",
    )
    assert found["tenant-signer"].found == "A. Tenant", "a field's value as filled in"


def test_an_invoice_shows_the_recomputed_total_against_the_stated_one(tmp_path: Path) -> None:
    ruleset = _shipped("logistics-invoice")
    wrong = _by_rule(explain([(str(_invoice(tmp_path / "a.json", "0.31")), 0, JSON)], ruleset))
    totals = wrong["totals"]
    assert (totals.outcome, totals.reason_code) == ("fail", "TOTAL_MISMATCH")
    assert (totals.subject, totals.expected, totals.found) == ("total", "0.30", "0.31")

    large = _invoice(tmp_path / "b.json", "60000.00", unit_price="20000.00")
    found = _by_rule(explain([(str(large), 3, JSON)], ruleset))
    assert (found["totals"].expected, found["totals"].found) == ("60000.00", "60000.00")
    above = found["large-invoice"]
    assert (above.outcome, above.position, above.subject) == ("review", 3, "total")
    assert (above.expected, above.found) == ("at most 10000.00", "60000.00")
    assert (found["currency"].expected, found["currency"].found) == (
        "one of EUR, USD, GBP, CHF",
        "EUR",
    )


def test_values_are_cut_to_a_bounded_length(tmp_path: Path) -> None:
    long_name = "x" * 5000
    lease = write_form_pdf(
        tmp_path / "lease.pdf", [CLAUSES], {**UNSIGNED, "landlord_signature": long_name}
    )
    signer = _by_rule(explain([(str(lease), 0, PDF)], _shipped("lease-renewal")))["landlord-signer"]
    assert signer.found == long_name[:MAX_VALUE_CHARS]


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", png[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", png[16:24])
    assert zlib.crc32(png[12:29]) == struct.unpack(">I", png[29:33])[0]
    return width, height


@pytest.mark.parametrize("width", [200, 333, 800, 1600])
def test_a_page_is_drawn_as_a_png_of_the_width_asked_for(tmp_path: Path, width: int) -> None:
    path = write_text_pdf(tmp_path / "two.pdf", ["first page", uuid.uuid4().hex])
    image = render_page(str(path), 2, width)
    assert _png_size(image.png) == (image.width, image.height)
    assert image.width == width
    assert abs(image.height - width * 792 / 612) <= 1
    assert image.page_count == 2


@pytest.mark.parametrize("width", [201, 333, 999, 1599])
def test_an_a4_page_is_drawn_exactly_as_wide_as_asked(tmp_path: Path, width: int) -> None:
    """A4's width in points (595.28) times most scales is no whole number:
    pdfium rounds the bitmap up, and the scale is chosen so it does not pass."""
    with text_pdf(["a4"]) as pdf:
        pdf.pages[0].obj.MediaBox = [0, 0, 595.28, 841.89]
        pdf.save(tmp_path / "a4.pdf")
    image = render_page(str(tmp_path / "a4.pdf"), 1, width)
    assert _png_size(image.png) == (width, image.height)


@pytest.mark.parametrize("page", [0, 3])
def test_a_page_the_source_lacks_is_refused(tmp_path: Path, page: int) -> None:
    path = write_text_pdf(tmp_path / "two.pdf", ["one", "two"])
    with pytest.raises(InvalidInput) as refused:
        render_page(str(path), page, 800)
    assert refused.value.reason == "PAGE_OUT_OF_RANGE"


@pytest.mark.parametrize(("asked", "given"), [(0, 800), (200, 200), (1600, 1600)])
def test_a_width_of_0_means_800(asked: int, given: int) -> None:
    assert checked_width(asked) == given


@pytest.mark.parametrize("width", [-1, 199, 1601])
def test_a_width_out_of_range_is_refused(width: int) -> None:
    with pytest.raises(InvalidInput) as refused:
        checked_width(width)
    assert refused.value.reason == "WIDTH_OUT_OF_RANGE"
    assert [v.field for v in refused.value.violations] == ["width"]


def test_review_filters_take_a_tenant_name_a_ruleset_name_or_version() -> None:
    filters = ReviewFilter.of(
        tenant="tenants/t1", ruleset="lease-renewal", reason_code="", include_resolved=False
    )
    assert (filters.tenant, filters.ruleset) == ("t1", "lease-renewal")
    assert filters.fingerprint() == {"tenant": "t1", "ruleset": "lease-renewal"}
    assert ReviewFilter.of(tenant="", ruleset="", reason_code="", include_resolved=False) == (
        ReviewFilter()
    )
    assert ReviewFilter().fingerprint() == {}, "tokens of an unfiltered listing stay as they were"


@pytest.mark.parametrize(
    ("field", "value"),
    [("tenant", "t1"), ("tenant", "tenants/"), ("tenant", "tenants/a/b"), ("ruleset", "x@")],
)
def test_a_malformed_filter_is_refused(field: str, value: str) -> None:
    asked = {"tenant": "", "ruleset": "", "reason_code": "", "include_resolved": False}
    with pytest.raises(InvalidInput) as refused:
        ReviewFilter.of(**{**asked, field: value})  # type: ignore[arg-type]
    assert [v.field for v in refused.value.violations] == [field]
