"""Manifest checks: every violation is collected and reported, not just the first.

An item names its source in exactly one way: the sha256 of an upload, or a
reference (``source``) to a record in one of the tenant's registered source
systems, which the pipeline fetches later. References are checked here as
digests are: the system must be registered, the key well-formed, the content
type one the pipeline takes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Protocol

from quire.admission.rulesets.catalog import ruleset_known
from quire.declarations import SHA256_HEX
from quire.errors import FieldViolation
from quire.type import job_pb2

__all__ = [
    "check_manifest",
    "has_references",
    "referenced_systems",
    "KNOWN_PROFILES",
    "PRIORITIES",
    "REFERENCE_CONTENT_TYPES",
]

MAX_DOCUMENT_ID = 128
KNOWN_PROFILES = frozenset({"", "simple", "strict", "simple-fillable", "strict-fillable"})
PRIORITIES = frozenset({"", "interactive", "batch"})
SOURCE_KEY = re.compile(r"[A-Za-z0-9._:/-]{1,256}")
"""A reference's key, matched whole: appended to its system's base URL after "/"."""
REFERENCE_CONTENT_TYPES = frozenset({"application/pdf", "application/json"})
JSON = "application/json"


class _Schema(Protocol):
    """What ``check_manifest`` reads of a registered system."""

    @property
    def schema(self) -> str: ...


def has_references(manifest: job_pb2.Manifest) -> bool:
    """Whether any item names its source by reference."""
    return any(item.HasField("source") for item in manifest.items)


def referenced_systems(manifest: job_pb2.Manifest) -> set[str]:
    """The source systems the manifest's references name."""
    return {item.source.system for item in manifest.items if item.HasField("source")}


def _key_is_safe(key: str) -> bool:
    return (
        SOURCE_KEY.fullmatch(key) is not None
        and not key.startswith("/")
        and ".." not in key.split("/")
    )


def _reference_violations(
    field: str, reference: job_pb2.SourceReference, systems: Mapping[str, _Schema]
) -> list[FieldViolation]:
    violations: list[FieldViolation] = []
    system = systems.get(reference.system)
    if system is None:
        violations.append(
            FieldViolation(
                f"{field}.system",
                "no source system of this name is registered for the tenant",
                "UNKNOWN_SOURCE_SYSTEM",
            )
        )
    if not _key_is_safe(reference.key):
        violations.append(
            FieldViolation(
                f"{field}.key",
                '1-256 characters of A-Z a-z 0-9 . _ : / -, not starting with "/", no ".." segment',
                "BAD_SOURCE_KEY",
            )
        )
    if reference.content_type not in REFERENCE_CONTENT_TYPES:
        violations.append(
            FieldViolation(
                f"{field}.content_type",
                "application/pdf or application/json",
                "CONTENT_TYPE_NOT_ALLOWED",
            )
        )
    elif system is not None and system.schema and reference.content_type != JSON:
        violations.append(
            FieldViolation(
                f"{field}.content_type",
                "the system checks its sources against a schema: application/json",
                "SCHEMA_NEEDS_JSON",
            )
        )
    return violations


def check_manifest(
    manifest: job_pb2.Manifest,
    *,
    uploaded: Mapping[str, object],
    max_items: int,
    rulesets: frozenset[str] = frozenset({"default@1"}),
    systems: Mapping[str, _Schema] | None = None,
) -> list[FieldViolation]:
    """Violations of ``manifest``; ``uploaded`` maps this tenant's known
    digests, ``systems`` its registered source systems (by id) among those
    the manifest names."""
    systems = systems or {}
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
        if item.HasField("source"):
            if item.sha256:
                violations.append(
                    FieldViolation(
                        f"{field}.source",
                        "give sha256 or source, not both",
                        "SOURCE_AND_DIGEST",
                    )
                )
            else:
                violations += _reference_violations(f"{field}.source", item.source, systems)
        elif not SHA256_HEX.match(item.sha256):
            violations.append(
                FieldViolation(f"{field}.sha256", "not a sha256 digest", "BAD_DIGEST")
            )
        elif item.sha256 not in uploaded:
            violations.append(
                FieldViolation(f"{field}.sha256", "no upload with this digest", "UNKNOWN_SOURCE")
            )
    if not ruleset_known(manifest.ruleset, rulesets):
        violations.append(FieldViolation("manifest.ruleset", "unknown ruleset", "UNKNOWN_RULESET"))
    if manifest.render_profile not in KNOWN_PROFILES:
        violations.append(
            FieldViolation("manifest.render_profile", "unknown render profile", "UNKNOWN_PROFILE")
        )
    return violations
