"""Repair with evidence (issue 13), in the sandbox's own functions: everyday
damage is rewritten cleanly and recorded as stable codes; what stays ambiguous
is refused with a sub-code; the rewrite launders nothing and inflates nothing."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pikepdf
import pytest

from quire.reasons import ReasonCode
from quire.testing.damaged import (
    AMBIGUOUS,
    EVERYDAY,
    damaged_bomb,
    damaged_javascript,
    unreadable_bomb,
)
from quire.testing.hostile import _one_page, raw_pdf
from quire.validator.damage import (
    REPAIRABLE,
    TOLERATED,
    UNRECOGNIZED,
    classify,
    codes_of,
    refusal_of,
)
from quire.validator.inspection import PDF_TYPE, Finding, inspect_source
from quire.validator.rulesets import Ruleset


def _inspect(path: Path, rewrite: Path | None) -> Finding:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return inspect_source(str(path), digest, PDF_TYPE, None, str(rewrite) if rewrite else "")


def _text(path: Path) -> str:
    return subprocess.run(
        ["pdftotext", "-q", str(path), "-"], capture_output=True, check=True, text=True
    ).stdout


@pytest.mark.parametrize("name", sorted(EVERYDAY))
def test_everyday_damage_is_repaired_into_a_clean_rewrite(name: str, tmp_path: Path) -> None:
    build, code = EVERYDAY[name]
    source = build(tmp_path / "source.pdf")
    uploaded = source.read_bytes()
    rewrite = tmp_path / "clean.pdf"

    finding = _inspect(source, rewrite)

    assert finding.reason == "" and finding.repaired, finding
    assert code in finding.warnings
    assert set(finding.warnings) <= REPAIRABLE | TOLERATED
    assert source.read_bytes() == uploaded, "the upload itself is never touched"
    clean = rewrite.read_bytes()
    assert finding.normalized_sha256 == hashlib.sha256(clean).hexdigest()
    assert finding.normalized_size == len(clean)
    assert finding.normalized_sha256 != hashlib.sha256(uploaded).hexdigest()
    assert clean.startswith(b"%PDF-")
    with pikepdf.open(rewrite, attempt_recovery=False) as pdf:
        assert len(pdf.pages) == finding.page_count >= 1
        assert not pdf.get_warnings()
        assert "/Size" in pdf.trailer


@pytest.mark.parametrize("name", sorted(EVERYDAY))
def test_a_repair_is_deterministic(name: str, tmp_path: Path) -> None:
    build, _code = EVERYDAY[name]
    source = build(tmp_path / "source.pdf")
    first = _inspect(source, tmp_path / "first.pdf")
    second = _inspect(source, tmp_path / "second.pdf")
    assert first.normalized_sha256 == second.normalized_sha256
    assert (tmp_path / "first.pdf").read_bytes() == (tmp_path / "second.pdf").read_bytes()


@pytest.mark.parametrize("name", ["xref-missing", "stream-without-length", "page-listed-twice"])
def test_the_rewrite_keeps_the_text(name: str, tmp_path: Path) -> None:
    build, _code = EVERYDAY[name]
    source = build(tmp_path / "source.pdf")
    assert _inspect(source, tmp_path / "clean.pdf").repaired
    expected = {"xref-missing": "damaged but readable", "stream-without-length": "no length"}
    text = _text(tmp_path / "clean.pdf")
    assert expected.get(name, "twice") in text


@pytest.mark.parametrize("name", sorted(EVERYDAY))
def test_policy_refuse_names_the_damage_and_writes_nothing(name: str, tmp_path: Path) -> None:
    build, _code = EVERYDAY[name]
    finding = _inspect(build(tmp_path / "source.pdf"), None)
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, "REPAIR_NOT_ALLOWED")
    assert not finding.repaired
    assert list(tmp_path.iterdir()) == [tmp_path / "source.pdf"]


@pytest.mark.parametrize("name", sorted(AMBIGUOUS))
def test_ambiguous_damage_is_refused_with_a_sub_code(name: str, tmp_path: Path) -> None:
    build, detail = AMBIGUOUS[name]
    finding = _inspect(build(tmp_path / "source.pdf"), tmp_path / "clean.pdf")
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, detail)
    assert not finding.repaired and finding.normalized_sha256 == ""


def test_a_page_count_the_tree_contradicts_is_refused_even_when_nothing_needs_repair(
    tmp_path: Path,
) -> None:
    objects = _one_page()
    objects[1] = b"<< /Type /Pages /Kids [3 0 R] /Count 2 >>"
    finding = _inspect(raw_pdf(tmp_path / "count.pdf", objects), tmp_path / "clean.pdf")
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, "PAGE_COUNT_MISMATCH")


def test_a_clean_file_is_not_rewritten(tmp_path: Path) -> None:
    finding = _inspect(raw_pdf(tmp_path / "ok.pdf", _one_page()), tmp_path / "clean.pdf")
    assert finding.reason == "" and not finding.repaired and finding.warnings == ()
    assert (tmp_path / "clean.pdf").exists() is False


def test_repairing_a_bomb_does_not_inflate_it(tmp_path: Path) -> None:
    source = damaged_bomb(tmp_path / "bomb.pdf")
    finding = _inspect(source, tmp_path / "clean.pdf")
    assert finding.reason == ReasonCode.DECOMPRESSED_SIZE_EXCEEDED
    assert "XREF_RECONSTRUCTED" in finding.warnings
    # The rewrite copied the stream as it was: no larger than the upload, give or take.
    assert (tmp_path / "clean.pdf").stat().st_size < 2 * source.stat().st_size


def test_repairing_launders_no_active_content(tmp_path: Path) -> None:
    finding = _inspect(damaged_javascript(tmp_path / "js.pdf"), tmp_path / "clean.pdf")
    assert finding.reason == ReasonCode.ACTIVE_CONTENT
    assert not finding.repaired


def test_every_repairable_code_has_a_warning_that_produces_it() -> None:
    from quire.validator import damage

    produced = {code for _pattern, code in damage._PATTERNS}  # noqa: SLF001
    assert produced >= REPAIRABLE


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("/tmp/x/plain-1 (offset 452): xref not found", "XREF_RECONSTRUCTED"),
        (
            "f: reported number of objects (9) is not one plus the highest object number (12)",
            "TRAILER_SIZE_WRONG",
        ),
        (
            "f (object 13 0, offset 790): stream dictionary lacks /Length key",
            "STREAM_LENGTH_RECOVERED",
        ),
        ("f (object 4 0, offset 281): expected n n obj", "OBJECT_OFFSET_WRONG"),
        (
            "f (object 7 0, offset 12): dictionary has duplicated key /Fn; last occurrence "
            "overrides earlier ones",
            "DUPLICATE_KEY",
        ),
        (
            "f (trailer, offset 9): unknown token while reading object; treating as null",
            "CONTENT_DROPPED",
        ),
        ("f (offset 9): xref syntax invalid", "XREF_SYNTAX_INVALID"),
        ("f (trailer, offset 99): trailer dictionary lacks /Size key", "TRAILER_SIZE_MISSING"),
        (
            "f: object 9 0 not found in file after regenerating cross reference table",
            "OBJECT_MISSING",
        ),
        (
            "f (object 3 0, offset 144): name with stray # will not work with PDF >= 1.2",
            "NAME_STRAY_HASH",
        ),
        ("f (offset 12): invalid character (Z) in hexstring", "HEX_STRING_INVALID"),
        ("f: root of pages tree has no /Kids array", "STRUCTURE_MISSING"),
        ("f (object 2 0): Loop detected in /Pages structure (getAllPages)", "PAGE_TREE_LOOP"),
        ("f: invalid password", "ENCRYPTION_UNREADABLE"),
        ("f (trailer, offset 544): recovered trailer has no /Root entry", "ROOT_RECOVERED"),
        ("f: something qpdf has never said before", UNRECOGNIZED),
    ],
)
def test_qpdf_messages_become_stable_codes(message: str, code: str) -> None:
    assert classify(message) == code


def test_the_first_code_a_repair_may_not_fix_refuses() -> None:
    codes = codes_of(["f: xref not found", "f: file is damaged", "f: duplicated key /A"])
    assert codes == ["XREF_RECONSTRUCTED", "DUPLICATE_KEY"]
    assert refusal_of(codes) == "DUPLICATE_KEY"
    assert refusal_of(["XREF_RECONSTRUCTED"]) == ""


def test_a_ruleset_names_its_repair_policy() -> None:
    body = {"name": "r", "version": "1", "rules": []}
    assert Ruleset.from_body(body).repair_policy == "normalize"
    assert Ruleset.from_body({**body, "repair": "review"}).repair_policy == "review"
    with pytest.raises(ValueError, match="repair"):
        Ruleset.from_body({**body, "repair": "maybe"})


def test_a_hostile_shape_is_refused_with_its_sub_code_and_not_repaired(tmp_path: Path) -> None:
    from quire.testing.hostile import many_objects
    from quire.validator.pdfchecks import PdfLimits

    source = many_objects(tmp_path / "many.pdf", 300)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    rewrite = tmp_path / "clean.pdf"
    finding = inspect_source(
        str(source), digest, PDF_TYPE, PdfLimits(max_objects=100), str(rewrite)
    )
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, "TOO_MANY_OBJECTS")
    assert not rewrite.exists(), "no repair was attempted"


def test_qpdf_refusing_deep_nesting_is_content_dropped_not_repaired(tmp_path: Path) -> None:
    from quire.testing.hostile import nested_arrays

    finding = _inspect(nested_arrays(tmp_path / "deep.pdf"), tmp_path / "clean.pdf")
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, "CONTENT_DROPPED")
    assert not finding.repaired


@pytest.mark.parametrize("rewrite", [True, False], ids=["normalize", "refuse"])
def test_a_bomb_no_reader_can_parse_is_still_refused_as_a_bomb(
    tmp_path: Path, rewrite: bool
) -> None:
    """No catalog, no table, no page tree: qpdf's recovery gives up
    (UNREADABLE), or the ruleset refuses repairs; the raw bytes still inflate
    past the cap, and that is the verdict."""
    source = unreadable_bomb(tmp_path / "bomb.pdf")
    finding = _inspect(source, tmp_path / "clean.pdf" if rewrite else None)
    assert (finding.reason, finding.detail) == (ReasonCode.DECOMPRESSED_SIZE_EXCEEDED, "")
