"""Evaluating a ruleset over a job's documents.

Each rule returns one decision per document it applies to (or one for the
job): ``pass``, ``fail`` with a reason code, or ``review``. Details name the
rule and the field or path checked, never the document's text or values.
Money is computed with ``Decimal``, never floats.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from quire.pipeline import Verdict
from quire.reasons import ReasonCode
from quire.validator.facts import DocumentFacts
from quire.validator.ruleset import Ruleset

__all__ = [
    "Decision",
    "InvoiceFigures",
    "amount",
    "evaluate",
    "invoice_figures",
    "lookup",
    "normalised",
    "verdict",
]

PDF = "application/pdf"
JSON = "application/json"
CENT = Decimal("0.01")
MAX_AMOUNT = Decimal(10) ** 15
MIN_EXPONENT = -8
"""Numbers outside these bounds are not money: the source is SCHEMA_INVALID."""


@dataclass(frozen=True)
class Decision:
    """One rule's decision on one document (``position``), or on the job (-1).
    Names what was checked, never the value found."""

    rule: str
    outcome: str  # "pass", "fail" or "review"
    reason_code: str = ""
    detail: str = ""
    position: int = -1


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def lookup(data: Any, path: str) -> Any:
    value = data
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def amount(value: Any) -> Decimal | None:
    """An amount as an exact decimal, or None when it is not a sane amount."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = Decimal(str(value))
    except (ArithmeticError, ValueError):
        return None
    if not number.is_finite() or abs(number) >= MAX_AMOUNT:
        return None
    exponent = number.as_tuple().exponent
    if not isinstance(exponent, int) or exponent < MIN_EXPONENT:
        return None
    return number


def _cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def _missing(rule: dict[str, Any], reason: str, detail: str) -> Decision:
    outcome = "review" if rule.get("on_missing") == "review" else "fail"
    return Decision(rule["id"], outcome, reason if outcome == "fail" else "REVIEW_REQUIRED", detail)


def _required_field(rule: dict[str, Any], docs: list[DocumentFacts]) -> Iterable[Decision]:
    wanted = rule["field"]
    for doc in docs:
        for name, value in doc.fields.items():
            if (name == wanted or name.endswith("." + wanted)) and value.strip():
                yield Decision(rule["id"], "pass", detail=f"field {wanted}", position=doc.position)
                return
    yield _missing(rule, "REQUIRED_FIELD_MISSING", f"field {wanted} missing or empty")


def _required_clause(rule: dict[str, Any], docs: list[DocumentFacts]) -> Iterable[Decision]:
    wanted = normalised(rule["text"])
    if any(wanted in normalised(doc.text) for doc in docs):
        yield Decision(rule["id"], "pass", detail="clause present")
    else:
        yield _missing(rule, "REQUIRED_CLAUSE_MISSING", f"clause {rule['id']} not found")


def _json_schema(rule: dict[str, Any], doc: DocumentFacts) -> Decision:
    from jsonschema import Draft202012Validator

    errors = sorted(
        Draft202012Validator(rule["schema"]).iter_errors(doc.data),
        key=lambda e: [str(p) for p in e.absolute_path],
    )
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        return Decision(rule["id"], "fail", "SCHEMA_INVALID", f"schema: {where}", doc.position)
    return Decision(rule["id"], "pass", position=doc.position)


def _required_value(rule: dict[str, Any], doc: DocumentFacts) -> Decision:
    value = lookup(doc.data, rule["path"])
    reason = rule.get("reason", "REQUIRED_VALUE_INVALID")
    ok = isinstance(value, str) and bool(value)
    if ok and "one_of" in rule:
        ok = value in rule["one_of"]
    if ok and "pattern" in rule:
        ok = re.fullmatch(rule["pattern"], value) is not None
    detail = f"value at {rule['path']}"
    return Decision(
        rule["id"], "pass" if ok else "fail", "" if ok else reason, detail, doc.position
    )


def _positive_quantities(rule: dict[str, Any], doc: DocumentFacts) -> Decision:
    lines = lookup(doc.data, "lines") or []
    for index, line in enumerate(lines if isinstance(lines, list) else []):
        quantity = amount(line.get("quantity") if isinstance(line, dict) else None)
        if quantity is None or quantity <= 0:
            return Decision(
                rule["id"], "fail", "QUANTITY_INVALID", f"lines[{index}].quantity", doc.position
            )
    return Decision(rule["id"], "pass", position=doc.position)


@dataclass(frozen=True)
class InvoiceFigures:
    """An invoice's total as recomputed from its lines, and as it declares it."""

    computed: Decimal
    declared: Decimal


def invoice_figures(data: Any) -> InvoiceFigures | str:
    """Sum of quantity × unit price, plus tax at ``tax_rate`` percent, and the
    declared ``total``; or where the data is no invoice (a rule's detail)."""
    lines = lookup(data, "lines")
    declared = amount(lookup(data, "total"))
    if not isinstance(lines, list) or declared is None:
        return "lines or total"
    subtotal = Decimal(0)
    for index, line in enumerate(lines):
        quantity = amount(line.get("quantity")) if isinstance(line, dict) else None
        price = amount(line.get("unit_price")) if isinstance(line, dict) else None
        if quantity is None or price is None:
            return f"lines[{index}]"
        subtotal += _cents(quantity * price)
    raw_rate = lookup(data, "tax_rate")
    rate = Decimal(0) if raw_rate is None else amount(raw_rate)
    if rate is None:
        return "tax_rate"
    return InvoiceFigures(subtotal + _cents(subtotal * rate / 100), declared)


def _invoice_totals(rule: dict[str, Any], doc: DocumentFacts) -> Decision:
    """The recomputed total (``invoice_figures``) against the declared one."""
    figures = invoice_figures(doc.data)
    if isinstance(figures, str):
        return Decision(rule["id"], "fail", "SCHEMA_INVALID", figures, doc.position)
    if figures.computed != figures.declared:  # exact: a total finer than cents does not match
        return Decision(
            rule["id"], "fail", "TOTAL_MISMATCH", "declared total differs", doc.position
        )
    return Decision(rule["id"], "pass", detail="total recomputed", position=doc.position)


def _review_above(rule: dict[str, Any], doc: DocumentFacts) -> Decision:
    value = amount(lookup(doc.data, rule["path"]))
    if value is not None and value > Decimal(rule["threshold"]):
        return Decision(
            rule["id"], "review", "REVIEW_REQUIRED", f"{rule['path']} over threshold", doc.position
        )
    return Decision(rule["id"], "pass", position=doc.position)


_PER_JOB: dict[str, Callable[[dict[str, Any], list[DocumentFacts]], Iterable[Decision]]] = {
    "required_field": _required_field,
    "required_clause": _required_clause,
}
_PER_STRUCTURED: dict[str, Callable[[dict[str, Any], DocumentFacts], Decision]] = {
    "json_schema": _json_schema,
    "required_value": _required_value,
    "positive_quantities": _positive_quantities,
    "invoice_totals": _invoice_totals,
    "review_above": _review_above,
}


def evaluate(ruleset: Ruleset, documents: list[DocumentFacts]) -> list[Decision]:
    pdfs = [doc for doc in documents if doc.content_type == PDF]
    structured = [doc for doc in documents if doc.content_type == JSON]
    decisions: list[Decision] = []
    for rule in ruleset.rules:
        kind = rule["kind"]
        if kind in _PER_JOB:
            decisions.extend(_PER_JOB[kind](rule, pdfs))
            continue
        for doc in structured:
            decision = _PER_STRUCTURED[kind](rule, doc)
            decisions.append(decision)
            if decision.reason_code == "SCHEMA_INVALID":
                return decisions  # later rules would read what the schema refused
    return decisions


def verdict(decisions: list[Decision]) -> tuple[Verdict, str]:
    """The decisions' verdict, and the reason of the first failure."""
    failed = next((d for d in decisions if d.outcome == "fail"), None)
    if failed is not None:
        return Verdict.REJECTED, failed.reason_code
    if any(d.outcome == "review" for d in decisions):
        return Verdict.NEEDS_REVIEW, ReasonCode.REVIEW_REQUIRED
    return Verdict.PASSED, ""
