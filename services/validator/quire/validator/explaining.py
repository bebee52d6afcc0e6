"""Why a ruleset decided as it did, in the values a reviewer decides on: for
each decision, the clause or field it concerns, what the rule expected and
what the source holds (a recomputed invoice total against the stated one, a
required clause and the text found for it).

Runs in a sandbox worker, like the judgement itself (``judging``): the
facts are extracted again from the same documents (a repaired source's
rewrite), the rules decide again (``rules.evaluate``), and each decision is
explained from the facts its rule read. The values are document content:
they go back to the one staff call that asked (ExplainReview), bounded in
length, and are never stored or logged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from quire.validator.facts import DocumentFacts, extract_facts
from quire.validator.rules import (
    Decision,
    amount,
    evaluate,
    invoice_figures,
    lookup,
    normalised,
)
from quire.validator.rulesets import Ruleset

__all__ = ["Explained", "MAX_VALUE_CHARS", "explain"]

MAX_VALUE_CHARS = 512
"""Characters kept of each expected or found value."""


@dataclass(frozen=True)
class Explained:
    """One decision and the values behind it."""

    rule: str
    outcome: str
    reason_code: str
    position: int
    subject: str
    """The clause or field concerned: ``clause:<rule>``, ``field:<name>``,
    ``total``, a JSON path."""
    expected: str
    found: str
    """"" when the source holds nothing there."""


def _text(value: Any) -> str:
    """A value as a reviewer reads it, bounded."""
    if value is None:
        return ""
    if isinstance(value, str | Decimal | int | float):
        shown = str(value)
    else:
        shown = json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
    return shown[:MAX_VALUE_CHARS]


Values = tuple[str, str, str]
"""(subject, expected, found)."""


def _field(rule: dict[str, Any], docs: list[DocumentFacts], _doc: DocumentFacts | None) -> Values:
    wanted = rule["field"]
    found = next(
        (
            value
            for doc in docs
            for name, value in doc.fields.items()
            if (name == wanted or name.endswith("." + wanted)) and value.strip()
        ),
        "",
    )
    return f"field:{wanted}", "a value", _text(found)


def _clause(rule: dict[str, Any], docs: list[DocumentFacts], _doc: DocumentFacts | None) -> Values:
    wanted = normalised(rule["text"])
    present = any(wanted in normalised(doc.text) for doc in docs)
    return f"clause:{rule['id']}", _text(rule["text"]), _text(wanted if present else "")


def _schema(rule: dict[str, Any], _docs: list[DocumentFacts], doc: DocumentFacts | None) -> Values:
    from jsonschema import Draft202012Validator

    assert doc is not None
    errors = sorted(
        Draft202012Validator(rule["schema"]).iter_errors(doc.data),
        key=lambda e: [str(p) for p in e.absolute_path],
    )
    if not errors:
        return "schema", "", ""
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(root)"
    expected = f"{first.validator}: {_text(first.validator_value)}"
    return f"schema:{where}", _text(expected), _text(first.instance)


def _value(rule: dict[str, Any], _docs: list[DocumentFacts], doc: DocumentFacts | None) -> Values:
    assert doc is not None
    if "one_of" in rule:
        expected = "one of " + ", ".join(str(v) for v in rule["one_of"])
    elif "pattern" in rule:
        expected = f"matching {rule['pattern']}"
    else:
        expected = "a value"
    return rule["path"], _text(expected), _text(lookup(doc.data, rule["path"]))


def _quantities(
    _rule: dict[str, Any], _docs: list[DocumentFacts], doc: DocumentFacts | None
) -> Values:
    assert doc is not None
    lines = lookup(doc.data, "lines") or []
    for index, line in enumerate(lines if isinstance(lines, list) else []):
        raw = line.get("quantity") if isinstance(line, dict) else None
        quantity = amount(raw)
        if quantity is None or quantity <= 0:
            return f"lines[{index}].quantity", "more than 0", _text(raw)
    return "lines[].quantity", "more than 0", ""


def _totals(_rule: dict[str, Any], _docs: list[DocumentFacts], doc: DocumentFacts | None) -> Values:
    assert doc is not None
    figures = invoice_figures(doc.data)
    if isinstance(figures, str):
        return figures, "", ""
    return "total", _text(figures.computed), _text(figures.declared)


def _above(rule: dict[str, Any], _docs: list[DocumentFacts], doc: DocumentFacts | None) -> Values:
    assert doc is not None
    found = lookup(doc.data, rule["path"])
    return rule["path"], _text(f"at most {rule['threshold']}"), _text(found)


_EXPLAIN: dict[
    str, Callable[[dict[str, Any], list[DocumentFacts], DocumentFacts | None], Values]
] = {
    "required_field": _field,
    "required_clause": _clause,
    "json_schema": _schema,
    "required_value": _value,
    "positive_quantities": _quantities,
    "invoice_totals": _totals,
    "review_above": _above,
}


def _explained(decision: Decision, rule: dict[str, Any], facts: list[DocumentFacts]) -> Explained:
    pdfs = [doc for doc in facts if doc.content_type == "application/pdf"]
    doc = next((f for f in facts if f.position == decision.position), None)
    subject, expected, found = _EXPLAIN[rule["kind"]](rule, pdfs, doc)
    return Explained(
        rule=decision.rule,
        outcome=decision.outcome,
        reason_code=decision.reason_code,
        position=decision.position,
        subject=subject,
        expected=expected,
        found=found,
    )


def explain(sources: list[tuple[str, int, str]], ruleset: Ruleset) -> list[Explained]:
    """The ruleset's decisions over ``sources`` ((path, position, content
    type), as ``judging.judge`` takes them), each with its values; inside a
    sandbox worker."""
    facts = [extract_facts(*source) for source in sources]
    rules = {rule["id"]: rule for rule in ruleset.rules}
    return [_explained(d, rules[d.rule], facts) for d in evaluate(ruleset, facts)]
