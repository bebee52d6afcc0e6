"""What is signed is what a viewer shows (issue 36): pdfium, a second reader
with its own parser and recovery, must read a repaired or two-way file as
qpdf's rewrite reads, or the file is refused (or parked for review) with the
pages that differ."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from quire.reasons import ReasonCode
from quire.testing.damaged import length_spans_objects, revisions_disagree, root_lost
from quire.testing.hostile import raw_pdf
from quire.testing.pdfs import write_text_pdf
from quire.validator import inspection
from quire.validator.evaluation import reads_two_ways
from quire.validator.faithfulness import (
    AMBIGUOUS_CONTENT,
    SECOND_READER_REFUSED,
    Agreement,
    agreement,
    two_readings,
)
from quire.validator.inspection import inspect_source
from quire.validator.pdfchecks import PdfLimits

HANDBUILT = Path("openpreserve") / "pdf-handbuilt-test-corpus"
PREMATURE_EOF = HANDBUILT / "T04_006_premature-EOF.pdf"
"""An ``%%EOF`` inside an object and a table to rebuild: qpdf's repair and
pdfium's own recovery show the page differently."""
PDFIUM_REFUSES = HANDBUILT / "T02-03_002_page-object-wrong-type.pdf"


def _inspect(path: Path, tmp_path: Path, limits: PdfLimits | None = None):  # type: ignore[no-untyped-def]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    rewrite = tmp_path / "clean.pdf"
    return inspect_source(str(path), digest, "application/pdf", limits, str(rewrite))


def test_the_same_pages_agree(tmp_path: Path) -> None:
    one = write_text_pdf(tmp_path / "a.pdf", ["pay 100", "to Alice"])
    two = write_text_pdf(tmp_path / "b.pdf", ["pay 100", "to Alice"])
    assert agreement(str(one), str(two)) == Agreement()


def test_other_text_on_a_page_is_ambiguous_and_names_that_page(tmp_path: Path) -> None:
    one = write_text_pdf(tmp_path / "a.pdf", ["pay 100", "to Alice"])
    two = write_text_pdf(tmp_path / "b.pdf", ["pay 100", "to Mallory"])
    assert agreement(str(one), str(two)) == Agreement(AMBIGUOUS_CONTENT, (2,))


def test_a_blank_page_is_not_a_written_one(tmp_path: Path) -> None:
    one = write_text_pdf(tmp_path / "a.pdf", ["terms", "signature"])
    two = write_text_pdf(tmp_path / "b.pdf", ["terms", ""])
    assert agreement(str(one), str(two)) == Agreement(AMBIGUOUS_CONTENT, (2,))


def test_a_page_one_reading_lacks_is_named(tmp_path: Path) -> None:
    one = write_text_pdf(tmp_path / "a.pdf", ["one", "two", "three"])
    two = write_text_pdf(tmp_path / "b.pdf", ["one"])
    assert agreement(str(one), str(two)) == Agreement(AMBIGUOUS_CONTENT, (2, 3))


def test_an_original_the_second_reader_cannot_open_is_not_confirmed(tmp_path: Path) -> None:
    good = write_text_pdf(tmp_path / "a.pdf", ["one"])
    junk = tmp_path / "junk.pdf"
    junk.write_bytes(b"%PDF-1.7\n1 0 obj\n<< >>\nendobj\n")
    assert agreement(str(junk), str(good)).detail == SECOND_READER_REFUSED


def test_structures_that_admit_two_readings_are_spotted(tmp_path: Path) -> None:
    clean = write_text_pdf(tmp_path / "clean.pdf", ["one"])
    assert not two_readings(str(clean))
    twice = tmp_path / "twice.pdf"
    twice.write_bytes(clean.read_bytes() + b"%PDF-1.4\n% a second document begins\n")
    assert two_readings(str(twice))
    assert two_readings(str(revisions_disagree(tmp_path / "revisions.pdf")))


def test_a_content_stream_whose_length_spans_other_objects_is_refused(tmp_path: Path) -> None:
    finding = _inspect(length_spans_objects(tmp_path / "masked.pdf"), tmp_path)
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, AMBIGUOUS_CONTENT)
    assert finding.differing_pages == (1,)
    assert reads_two_ways(finding)


def test_an_intact_file_with_two_headers_is_compared_and_refused_when_readings_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiring around the comparison: an intact file is compared only when
    its structure admits two readings, and a disagreement refuses it."""
    compared: list[str] = []

    def disagrees(path: str) -> Agreement:
        compared.append(path)
        return Agreement(AMBIGUOUS_CONTENT, (1,))

    monkeypatch.setattr(inspection, "plain_agreement", disagrees)
    clean = write_text_pdf(tmp_path / "clean.pdf", ["one"])
    assert _inspect(clean, tmp_path).reason == "" and not compared
    twice = tmp_path / "twice.pdf"
    twice.write_bytes(clean.read_bytes() + b"%PDF-1.4\n% a second document begins\n")
    finding = _inspect(twice, tmp_path)
    assert compared == [str(twice)]
    assert (finding.reason, finding.detail, finding.differing_pages) == (
        ReasonCode.MALFORMED_PDF,
        AMBIGUOUS_CONTENT,
        (1,),
    )
    review = _inspect(twice, tmp_path, PdfLimits(review_ambiguity=True))
    assert (review.reason, review.warnings, review.differing_pages) == (
        "",
        (AMBIGUOUS_CONTENT,),
        (1,),
    )
    assert reads_two_ways(review), "parked for review, with its disagreement recorded"


def test_under_review_an_intact_file_the_second_reader_cannot_open_still_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pages to name (pdfium read none), and no repair to park the job
    for: the disagreement alone must send it to review."""
    monkeypatch.setattr(
        inspection, "plain_agreement", lambda path: Agreement(SECOND_READER_REFUSED)
    )
    clean = write_text_pdf(tmp_path / "clean.pdf", ["one"])
    twice = tmp_path / "twice.pdf"
    twice.write_bytes(clean.read_bytes() + b"%PDF-1.4\n% a second document begins\n")
    review = _inspect(twice, tmp_path, PdfLimits(review_ambiguity=True))
    assert (review.reason, review.differing_pages, review.repaired) == ("", (), False)
    assert reads_two_ways(review)
    assert not reads_two_ways(_inspect(clean, tmp_path)), "an ordinary file reads one way"


def test_an_intact_two_header_file_both_readers_agree_on_passes(tmp_path: Path) -> None:
    clean = write_text_pdf(tmp_path / "clean.pdf", ["one"])
    twice = tmp_path / "twice.pdf"
    twice.write_bytes(clean.read_bytes() + b"%PDF-1.4\n% a second document begins\n")
    assert _inspect(twice, tmp_path).reason == ""
    assert not list(tmp_path.glob("*.reading")), "qpdf's plain reading is removed after use"


def test_a_repair_the_second_reader_contradicts_is_refused_not_signed(
    corpus: Path, tmp_path: Path
) -> None:
    finding = _inspect(corpus / PREMATURE_EOF, tmp_path)
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, AMBIGUOUS_CONTENT)
    assert finding.differing_pages == (1,)
    assert not finding.repaired, "no rewrite is offered for signing"
    assert "XREF_RECONSTRUCTED" in finding.warnings, "the damage is still named"


def test_under_review_policy_the_contradicted_repair_waits_with_its_pages(
    corpus: Path, tmp_path: Path
) -> None:
    finding = _inspect(corpus / PREMATURE_EOF, tmp_path, PdfLimits(review_ambiguity=True))
    assert finding.reason == "" and finding.repaired
    assert finding.warnings[-1] == AMBIGUOUS_CONTENT and finding.differing_pages == (1,)


def test_a_repair_of_a_file_the_second_reader_cannot_open_is_refused(
    corpus: Path, tmp_path: Path
) -> None:
    finding = _inspect(corpus / PDFIUM_REFUSES, tmp_path)
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, SECOND_READER_REFUSED)


def test_a_hand_built_file_without_header_damage_is_not_compared(tmp_path: Path) -> None:
    plain = raw_pdf(tmp_path / "plain.pdf", [b"<< /Type /Catalog /Pages 2 0 R >>"])
    assert not two_readings(str(plain))


def test_a_catalog_found_by_scanning_is_accepted_only_if_the_second_reader_agrees(
    tmp_path: Path,
) -> None:
    """qpdf finds the catalog of a file whose trailer lost /Root
    (ROOT_RECOVERED); pdfium does not open such a file, so nothing confirms
    the repair: refused, or parked for review, never signed unseen."""
    lost = root_lost(tmp_path / "lost.pdf")
    finding = _inspect(lost, tmp_path)
    assert (finding.reason, finding.detail) == (ReasonCode.MALFORMED_PDF, SECOND_READER_REFUSED)
    assert "ROOT_RECOVERED" in finding.warnings
    review = _inspect(lost, tmp_path, PdfLimits(review_ambiguity=True))
    assert review.reason == "" and review.repaired
    assert review.warnings[-1] == SECOND_READER_REFUSED


def _two_bodies(path: Path, body: bytes, number: int, *, entry: bytes, named: str) -> Path:
    """The one-page skeleton with a second body for object ``number`` after
    all the others. ``named`` says which body the cross-reference entry
    names: the ``first`` (the second is hidden from the table) or the
    ``second`` (an update, as incremental saving writes it). ``entry``
    formats each entry: the standard 20 bytes, or 19, which qpdf reads and
    pdfium rebuilds the table past, taking the last body it finds."""
    from quire.testing.hostile import _one_page  # noqa: PLC0415 - the shared skeleton

    return raw_pdf(
        path,
        _one_page(),
        tail=b"%d 0 obj\n" % number + body + b"\nendobj\n",
        entry=entry,
        named_in_tail=number if named == "second" else None,
    )


SCRIPTED_CATALOG = (
    b"<< /Type /Catalog /Pages 2 0 R /Names << /JavaScript << /Names [(x)"
    b" << /S /JavaScript /JS (app.alert(1)) >>] >> >> >>"
)
SCRIPTED_PAGE = (
    b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
    b" /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R"
    b" /Annots [<< /Type /Annot /Subtype /Link /Rect [72 700 200 720] /Border [0 0 0]"
    b" /A << /S /Launch /F (calc.exe) >> >>] >>"
)
SHORT_ENTRY = b"%010d 00000 n\n"
FULL_ENTRY = b"%010d 00000 n \n"


@pytest.mark.parametrize(("body", "number"), [(SCRIPTED_CATALOG, 1), (SCRIPTED_PAGE, 3)])
@pytest.mark.parametrize("entry", [SHORT_ENTRY, FULL_ENTRY])
def test_a_body_hidden_from_the_table_is_ambiguous(
    tmp_path: Path, body: bytes, number: int, entry: bytes
) -> None:
    """A later body the table does not name: qpdf reads the earlier one, a
    reader that rebuilds the table (pdfium, past 19-byte entries) the later
    one, with document JavaScript or a page's launch link none of the checks
    saw. Refused whichever reader takes which; an update the table names
    (the later body read by every reader) passes."""
    hidden = _two_bodies(tmp_path / "hidden.pdf", body, number, entry=entry, named="first")
    found = _inspect(hidden, tmp_path)
    assert (found.reason, found.detail) == (ReasonCode.MALFORMED_PDF, AMBIGUOUS_CONTENT)
    update = _two_bodies(
        tmp_path / "update.pdf", PLAIN_BODIES[number], number, entry=entry, named="second"
    )
    assert two_readings(str(update))
    assert _inspect(update, tmp_path).reason == ""


PLAIN_BODIES = {
    1: b"<< /Type /Catalog /Pages 2 0 R /PageMode /UseNone >>",
    3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
    b" /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R /Rotate 0 >>",
}


def test_what_only_the_second_reader_sees_a_document_do_is_ambiguous(tmp_path: Path) -> None:
    """pdfium's reading of the original has document JavaScript that its
    reading of qpdf's rewrite lacks: the readings disagree."""
    hidden = _two_bodies(
        tmp_path / "short.pdf", SCRIPTED_CATALOG, 1, entry=SHORT_ENTRY, named="first"
    )
    rewrite = _two_bodies(
        tmp_path / "clean.pdf", PLAIN_BODIES[1], 1, entry=FULL_ENTRY, named="first"
    )
    assert agreement(str(hidden), str(rewrite)) == Agreement(AMBIGUOUS_CONTENT)
    assert agreement(str(rewrite), str(rewrite)) == Agreement()


def _appended(path: Path, tail: bytes, *, objects: list[bytes] | None = None) -> Path:
    """The one-page skeleton (or ``objects``), then ``tail`` after every body
    the table names, with standard entries."""
    from quire.testing.hostile import _one_page  # noqa: PLC0415 - the shared skeleton

    return raw_pdf(path, objects or _one_page(), tail=tail)


def _object_stream(number: int, body: bytes) -> bytes:
    head = b"%d 0 " % number
    return (
        b"<< /Type /ObjStm /N 1 /First %d /Length %d >>\nstream\n" % (len(head), len(head + body))
        + head
        + body
        + b"\nendstream"
    )


@pytest.mark.parametrize(
    "tail",
    [
        b"3 1 obj\n" + SCRIPTED_PAGE + b"\nendobj\n",  # another generation
        b"3 0 %c\nobj\n" + SCRIPTED_PAGE + b"\nendobj\n",  # a comment in the header
        b"3 000000 obj\n" + SCRIPTED_PAGE + b"\nendobj\n",  # a long generation
        b"00000000003 0 obj\n" + SCRIPTED_PAGE + b"\nendobj\n",  # leading zeros
        b"9 0 obj\n" + _object_stream(3, SCRIPTED_PAGE) + b"\nendobj\n",  # in an object stream
    ],
    ids=["generation", "comment", "long-generation", "leading-zeros", "object-stream"],
)
def test_a_hidden_body_in_any_header_form_is_ambiguous(tmp_path: Path, tail: bytes) -> None:
    """However its header is written, a later body the table does not name
    is found: under another generation, with a comment or leading zeros in
    its header, or inside an object stream no entry names."""
    path = _appended(tmp_path / "hidden.pdf", tail)
    found = _inspect(path, tmp_path)
    assert (found.reason, found.detail) == (ReasonCode.MALFORMED_PDF, AMBIGUOUS_CONTENT)


def test_text_that_reads_like_a_header_inside_a_stream_is_no_body(tmp_path: Path) -> None:
    """A page whose (uncompressed) content shows ``1 0 obj ... endobj`` as
    text defines nothing: it passes."""
    from quire.testing.hostile import _one_page  # noqa: PLC0415 - the shared skeleton

    objects = _one_page(b"BT /F1 12 Tf 72 720 Td (1 0 obj << /Type /Catalog >> endobj) Tj ET")
    path = _appended(tmp_path / "text.pdf", b"", objects=objects)
    assert two_readings(str(path))
    assert _inspect(path, tmp_path).reason == ""


def test_an_update_written_with_cross_reference_streams_passes(corpus: Path) -> None:
    """veraPDF's files carry an incremental update whose earlier revision's
    cross-reference stream no table lists: no hidden body."""
    path = corpus / "verapdf" / "PDF_UA-1" / "7.2 Text" / "7.2-t02-pass-a.pdf"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert inspect_source(str(path), digest, "application/pdf").reason == ""


def _thumbnail_hiding(generation: int, *, indirect: bool) -> list[bytes]:
    """The skeleton with a page thumbnail whose data holds ``endstream
    endobj`` and a page body with a launch link: a reader that cannot find
    the stream's length (written in another object) ends the stream there."""
    from quire.testing.hostile import _one_page  # noqa: PLC0415 - the shared skeleton

    objects = _one_page(page_extra=b"/Thumb 6 0 R ")
    data = b"\nendstream\nendobj\n3 %d obj\n" % generation + SCRIPTED_PAGE + b"\nendobj\n"
    length = b"7 0 R" if indirect else b"%d" % len(data)
    objects.append(
        b"<< /Type /XObject /Subtype /Image /Width 1 /Height 1 /BitsPerComponent 8"
        b" /ColorSpace /DeviceGray /Length " + length + b" >>\nstream\n" + data + b"\nendstream"
    )
    objects.append(b"%d" % len(data))
    return objects


def test_a_body_in_stream_data_whose_length_is_elsewhere_is_hidden(tmp_path: Path) -> None:
    """Stream data counts as data only when its dictionary writes its length:
    a reader rebuilding the table cannot look up a length kept in another
    object, and takes what follows the first ``endstream``."""
    hidden = _appended(tmp_path / "indirect.pdf", b"", objects=_thumbnail_hiding(1, indirect=True))
    found = _inspect(hidden, tmp_path)
    assert (found.reason, found.detail) == (ReasonCode.MALFORMED_PDF, AMBIGUOUS_CONTENT)
    direct = _appended(tmp_path / "direct.pdf", b"", objects=_thumbnail_hiding(1, indirect=False))
    assert _inspect(direct, tmp_path).reason == ""


def test_a_referenced_body_the_table_lacks_is_hidden(tmp_path: Path) -> None:
    """The page names an annotation the table lacks (qpdf reads it as null); a
    rebuilding reader takes its body, a launch link. Text in it that names a
    cross-reference stream's type changes nothing."""
    from quire.testing.hostile import _one_page  # noqa: PLC0415 - the shared skeleton

    note = (
        b"6 0 obj\n<< /Type /Annot /Subtype /Link /Rect [72 700 200 720] /Border [0 0 0]"
        b" /A << /S /Launch /F (calc.exe) >> /X << /Type /XRef >> >>\nendobj\n"
    )
    path = _appended(
        tmp_path / "unlisted.pdf", note, objects=_one_page(page_extra=b"/Annots [6 0 R] ")
    )
    found = _inspect(path, tmp_path)
    assert (found.reason, found.detail) == (ReasonCode.MALFORMED_PDF, AMBIGUOUS_CONTENT)


def test_an_update_that_frees_an_object_hides_nothing(tmp_path: Path) -> None:
    """An incremental save that deletes an annotation: the page rewritten
    without it, the annotation's entry freed. Its old body is referred to by
    nothing live: the file passes."""
    from quire.testing.hostile import _one_page  # noqa: PLC0415 - the shared skeleton

    objects = _one_page(page_extra=b"/Annots [6 0 R] ")
    objects.append(b"<< /Type /Annot /Subtype /Square /Rect [72 700 200 720] >>")
    base = raw_pdf(tmp_path / "base.pdf", objects)
    data = base.read_bytes()
    previous = int(data.rsplit(b"startxref", 1)[1].split()[0])
    out = bytearray(data)
    page = len(out)
    out += b"3 0 obj\n" + objects[2].replace(b"/Annots [6 0 R] ", b"") + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 1\n0000000006 65535 f \n3 1\n%010d 00000 n \n6 1\n0000000000 00001 f \n" % page
    out += b"trailer\n<< /Size 7 /Root 1 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n" % (
        previous,
        xref,
    )
    updated = tmp_path / "updated.pdf"
    updated.write_bytes(bytes(out))
    assert _inspect(updated, tmp_path).reason == ""


def test_a_hidden_body_is_found_behind_junk_before_the_header(tmp_path: Path) -> None:
    """Offsets count from the header, which junk may precede: a hidden body
    is found all the same, and the same file without one passes."""
    hidden = _appended(tmp_path / "hidden.pdf", b"3 1 obj\n" + SCRIPTED_PAGE + b"\nendobj\n")
    behind = tmp_path / "behind.pdf"
    behind.write_bytes(b"junk before the header\n" + hidden.read_bytes())
    found = _inspect(behind, tmp_path)
    assert (found.reason, found.detail) == (ReasonCode.MALFORMED_PDF, AMBIGUOUS_CONTENT)
    plain = tmp_path / "plain.pdf"
    plain.write_bytes(b"junk before the header\n" + _appended(tmp_path / "p.pdf", b"").read_bytes())
    assert _inspect(plain, tmp_path).reason == ""
