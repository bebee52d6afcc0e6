"""One published ruleset: its body, the digest that pins it, and what it asks.

Kept apart from the book that stores rulesets (``quire.validator.rulesets``),
so the sandbox workers that judge documents by a ruleset load this and
nothing of the database."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quire.reasons import ReasonCode

__all__ = ["KNOWN_KINDS", "REPAIR_POLICIES", "Ruleset", "canonical"]

KNOWN_KINDS = {
    "required_field",
    "required_clause",
    "json_schema",
    "required_value",
    "positive_quantities",
    "invoice_totals",
    "review_above",
}
REPAIR_POLICIES = ("refuse", "normalize", "review")
"""What a ruleset does with a damaged PDF that qpdf's recovery can repair:
refuse it (MALFORMED_PDF), accept the clean rewrite, or accept it only after
an operator's review. ``normalize`` when the ruleset says nothing."""


def canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Ruleset:
    """One published ruleset, ``name@version``, and the digest that pins it.
    ``from_body`` refuses a body with an unknown rule, reason or repair policy."""

    name: str
    version: str
    body: dict[str, Any] = field(repr=False)
    digest: str
    file: Path | None = field(default=None, compare=False)
    """The file it was read from (None when read from the database)."""

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def rules(self) -> list[dict[str, Any]]:
        return list(self.body.get("rules", []))

    @property
    def allows_active_content(self) -> bool:
        return self.body.get("active_content", "refuse") == "allow"

    @property
    def repair_policy(self) -> str:
        return str(self.body.get("repair", "normalize"))

    @property
    def reads_content(self) -> bool:
        """Whether any rule needs the documents' text, fields or data."""
        return bool(self.rules)

    @classmethod
    def from_body(cls, body: dict[str, Any], file: Path | None = None) -> Ruleset:
        if body.get("repair", "normalize") not in REPAIR_POLICIES:
            raise ValueError(f"ruleset {body.get('name')}: repair must be one of {REPAIR_POLICIES}")
        for rule in body.get("rules", []):
            if rule.get("kind") not in KNOWN_KINDS or not rule.get("id"):
                raise ValueError(f"ruleset {body.get('name')}: unknown rule {rule.get('id')!r}")
            if "reason" in rule and rule["reason"] not in ReasonCode.__members__:
                raise ValueError(f"ruleset {body.get('name')}: unknown reason in {rule['id']!r}")
        return cls(
            name=str(body["name"]),
            version=str(body["version"]),
            body=body,
            digest=hashlib.sha256(canonical(body)).hexdigest(),
            file=file,
        )
