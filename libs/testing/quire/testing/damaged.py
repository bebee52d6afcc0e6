"""PDFs with the everyday damage viewers tolerate, and with damage that stays
ambiguous, built byte by byte (issue 13: repair with evidence).

Each builder writes one file and returns its path. ``EVERYDAY`` maps a name to
(builder, the damage code the repair must record); ``AMBIGUOUS`` maps a name
to (builder, the MALFORMED_PDF sub-code the repair must refuse it with).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from pathlib import Path

from quire.testing.hostile import FONT, _one_page, _stream, flate_bomb, raw_pdf

Builder = Callable[[Path], Path]


def _text(label: str) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % label.encode()


def _clean(path: Path, label: str = "damaged but readable") -> bytes:
    return raw_pdf(path, _one_page(_text(label))).read_bytes()


def _replace(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def xref_offset_wrong(path: Path) -> Path:
    """startxref points a few bytes before the table: viewers rebuild it."""
    data = _clean(path)
    start = int(re.search(rb"startxref\n(\d+)", data).group(1))  # type: ignore[union-attr]
    return _replace(path, data.replace(b"startxref\n%d" % start, b"startxref\n%d" % (start - 7)))


def xref_missing(path: Path) -> Path:
    """No cross-reference table at all."""
    data = _clean(path)
    table = data.index(b"xref\n0 ")
    trailer = data.index(b"trailer\n")
    return _replace(path, data[:table] + data[trailer:])


def trailer_size_wrong(path: Path) -> Path:
    """/Size is not one more than the highest object number."""
    data = _clean(path)
    return _replace(path, re.sub(rb"/Size \d+", b"/Size 3", data))


def trailer_size_missing(path: Path) -> Path:
    """A trailer without /Size (and so a table to rebuild)."""
    data = _clean(path)
    return _replace(path, re.sub(rb"/Size \d+ ", b"", data))


def stream_without_length(path: Path) -> Path:
    """A content stream whose dictionary has no /Length."""
    objects = _one_page(_text("no length"))
    contents = _text("no length")
    objects[3] = b"<< >>\nstream\n" + contents + b"\nendstream"
    return raw_pdf(path, objects)


def stream_length_wrong(path: Path) -> Path:
    """A content stream whose /Length is too long."""
    objects = _one_page()
    contents = _text("wrong length")
    objects[3] = b"<< /Length %d >>\nstream\n" % (len(contents) + 40) + contents + b"\nendstream"
    return raw_pdf(path, objects)


def page_attributes_missing(path: Path) -> Path:
    """A page with neither /MediaBox nor /Resources, on itself or to inherit."""
    objects = _one_page()
    objects[2] = b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>"
    objects[3] = _stream(b"0 0 m 100 100 l S")
    return raw_pdf(path, objects)


def object_at_offset_zero(path: Path) -> Path:
    """The font's xref entry says offset 0 (it is not used by the page)."""
    objects = _one_page(b"0 0 m 100 100 l S")
    objects.append(b"<< /Unused true >>")
    data = raw_pdf(path, objects).read_bytes()
    offsets = re.findall(rb"(\d{10}) 00000 n \n", data)
    last = offsets[-1]
    return _replace(path, data.replace(last + b" 00000 n \n", b"0000000000 00000 n \n"))


def page_listed_twice(path: Path) -> Path:
    """The page tree lists one page twice (and counts it twice)."""
    objects = _one_page(_text("twice"))
    objects[1] = b"<< /Type /Pages /Kids [3 0 R 3 0 R] /Count 2 >>"
    return raw_pdf(path, objects)


def junk_before_header(path: Path) -> Path:
    """Bytes before ``%PDF-``: every offset is off by their length."""
    data = _clean(path)
    return _replace(path, b"\x00\x00junk\r\n" + data)


def flate_checksum_wrong(path: Path) -> Path:
    """A Flate content stream that decodes to its end with a wrong Adler-32:
    qpdf, pdfium and poppler all show its text."""
    compressed = zlib.compress(_text("checksum damaged"))
    broken = compressed[:-4] + bytes(4)
    objects = _one_page()
    objects[3] = _stream(broken, b"/Filter /FlateDecode")
    return raw_pdf(path, objects)


EVERYDAY: dict[str, tuple[Builder, str]] = {
    "flate-checksum-wrong": (flate_checksum_wrong, "FLATE_CHECKSUM_WRONG"),
    "xref-offset-wrong": (xref_offset_wrong, "XREF_RECONSTRUCTED"),
    "xref-missing": (xref_missing, "XREF_RECONSTRUCTED"),
    "trailer-size-wrong": (trailer_size_wrong, "TRAILER_SIZE_WRONG"),
    "trailer-size-missing": (trailer_size_missing, "TRAILER_SIZE_MISSING"),
    "stream-without-length": (stream_without_length, "STREAM_LENGTH_RECOVERED"),
    "stream-length-wrong": (stream_length_wrong, "STREAM_LENGTH_RECOVERED"),
    "page-attributes-missing": (page_attributes_missing, "PAGE_MEDIABOX_DEFAULTED"),
    "object-at-offset-zero": (object_at_offset_zero, "OBJECT_OFFSET_ZERO"),
    "page-listed-twice": (page_listed_twice, "PAGE_LISTED_TWICE"),
}


def revisions_disagree(path: Path) -> Path:
    """Two revisions define the page's contents differently, and the
    cross-reference data is lost: which text is the document is a guess."""
    first = _clean(path, "pay 100")
    table = first.index(b"xref\n0 ")
    body = first[:table]
    update = b"4 0 obj\n" + _stream(_text("pay 900")) + b"\nendobj\n"
    trailer = b"trailer\n<< /Size 6 /Root 1 0 R >>\n%%EOF\n"
    return _replace(path, body + update + trailer)


def page_count_mismatch(path: Path) -> Path:
    """The page tree claims three pages and holds one; the xref is lost too."""
    objects = _one_page(_text("one of three?"))
    objects[1] = b"<< /Type /Pages /Kids [3 0 R] /Count 3 >>"
    return _xref_lost(raw_pdf(path, objects))


def duplicate_key(path: Path) -> Path:
    """A page dictionary that gives /Contents twice, and a broken xref."""
    objects = _one_page(_text("first"))
    objects.append(_stream(_text("second")))
    objects[2] = objects[2].replace(b"/Contents 4 0 R", b"/Contents 4 0 R /Contents 6 0 R")
    data = raw_pdf(path, objects).read_bytes()
    return _replace(path, data.replace(b"startxref\n", b"startxref\n1"))


def unreadable(path: Path) -> Path:
    """A header and nothing a reader could call a document."""
    return _replace(path, b"%PDF-1.7\n1 0 obj\n<< /Type /Font >>\nendobj\n%%EOF\n")


def length_spans_objects(path: Path) -> Path:
    """The page's content stream ends (``endstream``, ``endobj``) where a
    keyword-reading viewer stops, but its /Length runs on through an unused
    stream object to that one's end: readers that trust the length show a
    second line of text the others do not (content masking)."""
    objects = _one_page()
    objects[3] = b"<< /Length 0000 >>\nstream\n" + _text("pay 100") + b"\nendstream"
    objects.append(_stream(_text("pay 900")))
    data = raw_pdf(path, objects).read_bytes()
    start = data.index(b"stream\n", data.index(b"4 0 obj")) + len(b"stream\n")
    end = data.index(b"\nendstream", data.index(b"6 0 obj"))
    # Four digits either way: every offset in the table stays right.
    return _replace(path, data.replace(b"/Length 0000 ", b"/Length %04d " % (end - start), 1))


AMBIGUOUS: dict[str, tuple[Builder, str]] = {
    "length-spans-objects": (length_spans_objects, "AMBIGUOUS_CONTENT"),
    "revisions-disagree": (revisions_disagree, "REVISIONS_DISAGREE"),
    "page-count-mismatch": (page_count_mismatch, "PAGE_COUNT_MISMATCH"),
    "duplicate-key": (duplicate_key, "DUPLICATE_KEY"),
    "unreadable": (unreadable, "UNREADABLE"),
}


def _xref_lost(path: Path) -> Path:
    """Cut the cross-reference table and startxref from a file written whole."""
    data = path.read_bytes()
    return _replace(path, data[: data.index(b"xref\n0 ")] + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n")


def root_lost(path: Path) -> Path:
    """The trailer lost /Root and the table is gone: qpdf finds the catalog by
    scanning; pdfium does not open the file at all."""
    data = _clean(path, "root lost").replace(b"/Root 1 0 R", b"")
    return _replace(path, data[: data.index(b"xref\n0 ")] + b"%%EOF\n")


def damaged_bomb(path: Path) -> Path:
    """A flate bomb whose xref is lost: the repair must not inflate it."""
    return _xref_lost(flate_bomb(path))


def unreadable_bomb(path: Path) -> Path:
    """A flate bomb in a file with no catalog, no page tree and no table:
    nothing a reader could call a document, and still a bomb."""
    stream = flate_bomb(path).read_bytes()
    start = stream.index(b"6 0 obj")
    end = stream.index(b"endobj", start) + len(b"endobj")
    return _replace(path, b"%PDF-1.7\n" + stream[start:end] + b"\n%%EOF\n")


def damaged_javascript(path: Path) -> Path:
    """JavaScript on open, in a file whose xref is lost: repair launders nothing."""
    objects = _one_page()
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R /OpenAction 6 0 R >>"
    objects.append(b"<< /S /JavaScript /JS (app.alert(1)) >>")
    return _xref_lost(raw_pdf(path, objects))


__all__ = [
    "AMBIGUOUS",
    "EVERYDAY",
    "FONT",
    "damaged_bomb",
    "unreadable_bomb",
    "root_lost",
    "damaged_javascript",
]
