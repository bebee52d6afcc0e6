"""Manifest checks report every violation; the manifest digest ignores row order."""

from __future__ import annotations

from quire.admission.jobs.manifests import check_manifest
from quire.jobs import manifest_digest
from quire.type import job_pb2

A = "a" * 64
B = "b" * 64


def _manifest(
    *items: tuple[int, str, str], ruleset: str = "", profile: str = ""
) -> job_pb2.Manifest:
    return job_pb2.Manifest(
        items=[job_pb2.ManifestItem(position=p, document_id=d, sha256=s) for p, d, s in items],
        ruleset=ruleset,
        render_profile=profile,
    )


def test_a_good_manifest_has_no_violations() -> None:
    manifest = _manifest((0, "cover", A), (1, "terms", B))
    assert check_manifest(manifest, uploaded={A: 1, B: 1}, max_items=10) == []


def test_every_violation_is_reported_at_once() -> None:
    manifest = _manifest(
        (1, "cover", A),
        (1, "cover", "not-a-digest"),
        (3, "", "c" * 64),
        ruleset="nope@9",
        profile="fancy",
    )
    reasons = [v.reason for v in check_manifest(manifest, uploaded={A: 1}, max_items=2)]
    assert sorted(reasons) == sorted(
        [
            "TOO_MANY_ITEMS",
            "DUPLICATE_POSITION",
            "POSITIONS_NOT_CONTIGUOUS",
            "DUPLICATE_DOCUMENT_ID",
            "DUPLICATE_DOCUMENT_ID",
            "BAD_DIGEST",
            "MISSING_DOCUMENT_ID",
            "UNKNOWN_SOURCE",
            "UNKNOWN_RULESET",
            "UNKNOWN_PROFILE",
        ]
    )


def test_positions_starting_at_one_are_refused() -> None:
    manifest = _manifest((1, "cover", A), (2, "terms", B))
    reasons = [v.reason for v in check_manifest(manifest, uploaded={A: 1, B: 1}, max_items=10)]
    assert reasons == ["POSITIONS_NOT_CONTIGUOUS"]


def test_an_empty_manifest_is_refused() -> None:
    assert [v.reason for v in check_manifest(_manifest(), uploaded={}, max_items=10)] == ["EMPTY"]


def test_manifest_digest_depends_on_positions_not_row_order() -> None:
    forward = _manifest((0, "cover", A), (1, "terms", B))
    shuffled = _manifest((1, "terms", B), (0, "cover", A))
    swapped = _manifest((0, "terms", B), (1, "cover", A))
    assert manifest_digest(forward) == manifest_digest(shuffled)
    assert manifest_digest(forward) != manifest_digest(swapped)


def test_every_violation_names_its_field_in_one_path_form() -> None:
    """AIP-193: ``manifest.items[1].position``; a field of an item always names
    the item by its index."""
    import re

    manifest = _manifest(
        (1, "cover", A),
        (1, "cover", "not-a-digest"),
        (7, "", "c" * 64),
        ruleset="nope@9",
        profile="fancy",
    )
    violations = check_manifest(manifest, uploaded={A: 1}, max_items=2)
    path = re.compile(r"^[a-z_][a-z0-9_]*(\[\d+\])?(\.[a-z_][a-z0-9_]*(\[\d+\])?)*$")
    for violation in violations:
        assert path.match(violation.field), violation.field
        assert not violation.field.startswith("manifest.items.")
    by_reason = {v.reason: v.field for v in violations}
    assert by_reason["DUPLICATE_POSITION"] == "manifest.items[1].position"
    assert by_reason["POSITIONS_NOT_CONTIGUOUS"] == "manifest.items[2].position"
