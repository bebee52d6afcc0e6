"""Property-based tests of manifest validation: every defect is reported, no
sound manifest is refused, and the digest depends on positions only."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from quire.admission.jobs.manifests import KNOWN_PROFILES, check_manifest
from quire.jobs import manifest_digest
from quire.type import job_pb2

UPLOADED = {f"{n:064x}" for n in range(1, 6)}
NOT_UPLOADED = [f"{n:064x}" for n in range(100, 103)]
MAX_ITEMS = 6

digests = st.sampled_from(sorted(UPLOADED) + NOT_UPLOADED + ["bad", "A" * 64, ""])
items = st.builds(
    job_pb2.ManifestItem,
    position=st.integers(min_value=-2, max_value=9),
    document_id=st.sampled_from(["", "a", "b", "c", "d", "x" * 129]),
    sha256=digests,
)
manifests = st.builds(
    job_pb2.Manifest,
    items=st.lists(items, max_size=8),
    ruleset=st.sampled_from(["", "default", "other@1"]),
    render_profile=st.sampled_from(["", "simple", "strict", "fancy"]),
)


def expected_reasons(manifest: job_pb2.Manifest) -> set[str]:
    """An independent statement of the rules."""
    found: set[str] = set()
    entries = list(manifest.items)
    if not entries:
        found.add("EMPTY")
    if len(entries) > MAX_ITEMS:
        found.add("TOO_MANY_ITEMS")
    positions = [e.position for e in entries]
    if len(set(positions)) != len(positions):
        found.add("DUPLICATE_POSITION")
    if entries and sorted(set(positions)) != list(range(len(entries))):
        found.add("POSITIONS_NOT_CONTIGUOUS")
    ids = Counter(e.document_id for e in entries)
    for entry in entries:
        if not entry.document_id:
            found.add("MISSING_DOCUMENT_ID")
        elif len(entry.document_id) > 128:
            found.add("DOCUMENT_ID_TOO_LONG")
        elif ids[entry.document_id] > 1:
            found.add("DUPLICATE_DOCUMENT_ID")
        valid = len(entry.sha256) == 64 and all(c in "0123456789abcdef" for c in entry.sha256)
        if not valid:
            found.add("BAD_DIGEST")
        elif entry.sha256 not in UPLOADED:
            found.add("UNKNOWN_SOURCE")
    if manifest.ruleset not in {"", "default", "default@1"}:
        found.add("UNKNOWN_RULESET")
    if manifest.render_profile not in KNOWN_PROFILES:
        found.add("UNKNOWN_PROFILE")
    return found


@settings(max_examples=400, deadline=None)
@given(manifests)
def test_every_defect_is_reported_and_nothing_else(manifest: job_pb2.Manifest) -> None:
    violations = check_manifest(
        manifest, uploaded=dict.fromkeys(UPLOADED, True), max_items=MAX_ITEMS
    )
    assert {v.reason for v in violations} == expected_reasons(manifest)
    assert all(v.field and v.description for v in violations)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(UPLOADED)), min_size=1, max_size=MAX_ITEMS, unique=True),
    st.randoms(use_true_random=False),
)
def test_a_sound_manifest_in_any_row_order_is_accepted_with_one_digest(
    chosen: list[str], shuffler
) -> None:  # type: ignore[no-untyped-def]
    rows = [
        job_pb2.ManifestItem(position=index, document_id=f"doc-{index}", sha256=digest)
        for index, digest in enumerate(chosen)
    ]
    shuffled = list(rows)
    shuffler.shuffle(shuffled)
    ordered = job_pb2.Manifest(items=rows)
    mixed = job_pb2.Manifest(items=shuffled)
    uploaded = dict.fromkeys(UPLOADED, True)
    assert check_manifest(mixed, uploaded=uploaded, max_items=MAX_ITEMS) == []
    assert manifest_digest(mixed) == manifest_digest(ordered)
