"""Manifest checks: every violation is collected and reported, not just the first."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from quire.admission.catalog import resolve_ruleset
from quire.errors import FieldViolation
from quire.type import job_pb2

__all__ = ["check_manifest", "KNOWN_PROFILES", "PRIORITIES"]

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_DOCUMENT_ID = 128
KNOWN_PROFILES = frozenset({"", "simple", "strict", "simple-fillable", "strict-fillable"})
PRIORITIES = frozenset({"", "interactive", "batch"})


def check_manifest(
    manifest: job_pb2.Manifest,
    *,
    uploaded: Mapping[str, object],
    max_items: int,
    rulesets: frozenset[str] = frozenset({"default@1"}),
) -> list[FieldViolation]:
    """Violations of ``manifest``; ``uploaded`` maps this tenant's known digests."""
    violations: list[FieldViolation] = []
    items = list(manifest.items)
    if not items:
        violations.append(
            FieldViolation("manifest.items", "at least one item is required", "EMPTY")
        )
    if len(items) > max_items:
        violations.append(
            FieldViolation(
                "manifest.items", f"at most {max_items} items are allowed", "TOO_MANY_ITEMS"
            )
        )
    # Every path names one item (AIP-193: ``manifest.items[2].position``): a
    # duplicated position at its second use, a gap at the first item out of place.
    positions = Counter(item.position for item in items)
    first_use: dict[int, int] = {}
    repeats: list[int] = []
    for index, item in enumerate(items):
        if item.position in first_use:
            if positions[item.position] > 1 and first_use[item.position] >= 0:
                repeats.append(index)
                first_use[item.position] = -1  # one violation per duplicated position
        else:
            first_use[item.position] = index
    for index in repeats:
        position = items[index].position
        violations.append(
            FieldViolation(
                f"manifest.items[{index}].position",
                f"position {position} is used {positions[position]} times",
                "DUPLICATE_POSITION",
            )
        )
    expected = set(range(len(items)))
    if items and set(positions) != expected:
        out_of_range = [i for i, item in enumerate(items) if item.position not in expected]
        index = (out_of_range or repeats or [0])[0]
        violations.append(
            FieldViolation(
                f"manifest.items[{index}].position",
                "positions must be unique and contiguous from 0",
                "POSITIONS_NOT_CONTIGUOUS",
            )
        )
    ids = Counter(item.document_id for item in items)
    for index, item in enumerate(items):
        field = f"manifest.items[{index}]"
        if not item.document_id:
            violations.append(
                FieldViolation(
                    f"{field}.document_id", "document_id is required", "MISSING_DOCUMENT_ID"
                )
            )
        elif len(item.document_id) > MAX_DOCUMENT_ID:
            violations.append(
                FieldViolation(
                    f"{field}.document_id",
                    f"at most {MAX_DOCUMENT_ID} characters",
                    "DOCUMENT_ID_TOO_LONG",
                )
            )
        elif ids[item.document_id] > 1:
            violations.append(
                FieldViolation(
                    f"{field}.document_id", "document_id is not unique", "DUPLICATE_DOCUMENT_ID"
                )
            )
        if not SHA256_HEX.match(item.sha256):
            violations.append(
                FieldViolation(f"{field}.sha256", "not a sha256 digest", "BAD_DIGEST")
            )
        elif item.sha256 not in uploaded:
            violations.append(
                FieldViolation(f"{field}.sha256", "no upload with this digest", "UNKNOWN_SOURCE")
            )
    if resolve_ruleset(manifest.ruleset, rulesets) is None:
        violations.append(FieldViolation("manifest.ruleset", "unknown ruleset", "UNKNOWN_RULESET"))
    if manifest.render_profile not in KNOWN_PROFILES:
        violations.append(
            FieldViolation("manifest.render_profile", "unknown render profile", "UNKNOWN_PROFILE")
        )
    return violations
