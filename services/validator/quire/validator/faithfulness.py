"""Whether what later stages sign is what a viewer shows: qpdf's reading of a
source checked against a second reader's (``secondreader``), in the sandbox.

Two readers of one file must see one document. A repair is qpdf's guess at
what damaged bytes meant; an intact file can still be read two ways when it
carries more than one header or defines one object twice across revisions.
For each such file, pdfium reads the original and qpdf's rewrite (the clean
rewrite of a repair, or qpdf's plain reading of an intact file). Any page
whose text, raster or annotations differ, a page count that differs, or
document JavaScript, attachments or a form only one reading has, makes the
file ``AMBIGUOUS_CONTENT``; an original pdfium cannot open at all is
``SECOND_READER_REFUSED``. The ruleset's repair policy decides what follows
(``inspection``): refused as ``MALFORMED_PDF`` with that sub-code, or parked
for review with the pages named.

An intact file whose table names an earlier body of some object than a
later, different one (``readings``) is ambiguous before any reading: a
reader that rebuilds the table takes the later body, and pdfium's
agreement with qpdf on the file as it is says nothing of that reading.

A page content stream whose bytes run through an ``endstream``/``endobj``
pair is refused before any of this (``masked_stream``): its ``/Length``
says one thing and its keywords another, and the readers that trust the
keywords (poppler among them) show other text than the readers that trust
the length (qpdf and pdfium alike), so comparing those two would not catch it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quire.memoryfiles import save_pdf, scratch_beside
from quire.validator.repair import bodies_differ, body_digest, object_bodies
from quire.validator.secondreader import differing_pages, read_with_pdfium

__all__ = [
    "AMBIGUOUS_CONTENT",
    "SECOND_READER_REFUSED",
    "Agreement",
    "agreement",
    "masked_stream",
    "plain_agreement",
    "readings",
    "two_readings",
]

AMBIGUOUS_CONTENT = "AMBIGUOUS_CONTENT"
SECOND_READER_REFUSED = "SECOND_READER_REFUSED"
_HEADER = re.compile(rb"%PDF-\d")
_KEYWORDS_INSIDE = re.compile(rb"endstream\s+endobj\b")


@dataclass(frozen=True)
class Agreement:
    """Whether the two readers saw one document, and if not, where they differ."""

    detail: str = ""
    """Empty when the readers agree, else ``AMBIGUOUS_CONTENT`` or ``SECOND_READER_REFUSED``."""
    pages: tuple[int, ...] = ()
    """The 1-based pages read differently."""

    @property
    def agrees(self) -> bool:
        return not self.detail


def readings(path: str, table: Mapping[tuple[int, int], Any] | None = None) -> tuple[bool, bool]:
    """Whether an intact file's structure admits two readings (more than one
    ``%PDF-`` header, or an object number defined twice with different
    bodies), and whether a revision is hidden from its cross-reference
    ``table`` (qpdf's, ``pikepdf.Pdf.get_xref_table``; not judged without
    one): some object defined again, differently, later in the file than the
    body its entry names (for an object kept in an object stream, later than
    that stream).

    Later revisions come later in a file: an incremental update appends its
    bodies and a table that names them, so every reader takes the last. A
    later body the table does not name is read by qpdf's table only: a
    reader that rebuilds the table (pdfium does, for entries it will not
    parse) takes that body instead, and sees a document none of the checks
    saw, with its own actions, scripts or annotations. One read and one scan
    of the file serve both."""
    with open(path, "rb") as handle:
        data = handle.read()
    bodies = object_bodies(data)
    two = len(_HEADER.findall(data)) > 1 or bodies_differ(data, bodies)
    return two, table is not None and _hidden(data, bodies, table)


def two_readings(path: str) -> bool:
    """``readings``' first answer."""
    return readings(path)[0]


def _hidden(
    data: bytes, bodies: dict[tuple[int, int], list[int]], table: Mapping[tuple[int, int], Any]
) -> bool:
    for objgen, found in bodies.items():
        entry = table.get(objgen)
        if entry is None:
            continue
        if entry.type == 2:  # in an object stream: a plain body after that stream is hidden
            holder = table.get((entry.obj_stream_number, 0))
            if holder is not None and holder.type == 1 and found[-1] > holder.offset:
                return True
            continue
        if entry.type != 1 or len(found) < 2:
            continue
        named = [after for after in found if after > entry.offset]
        if not named:
            continue
        live = named[0]  # the body the entry names: its header starts at the offset
        digest = body_digest(data, live)
        if any(body_digest(data, after) != digest for after in named[1:]):
            return True
    return False


def masked_stream(pdf: Any) -> tuple[int, ...]:
    """The 1-based pages with a content stream that holds the keywords ending
    a stream and its object: its ``/Length`` runs over into the objects after it."""
    import pikepdf

    masked = []
    for number, page in enumerate(pdf.pages, start=1):
        contents = page.obj.get("/Contents")
        streams = contents if isinstance(contents, pikepdf.Array) else [contents]
        if any(
            isinstance(stream, pikepdf.Stream) and _KEYWORDS_INSIDE.search(stream.read_raw_bytes())
            for stream in streams
        ):
            masked.append(number)
    return tuple(masked)


def agreement(original: str, rewrite: str) -> Agreement:
    """pdfium's reading of ``original`` against its reading of ``rewrite``.

    pdfium draws the first glyphs of a substituted font slightly differently
    from later ones in the same process, so pages that differ are read again
    once (both files, caches now warm) before they count as different."""
    seen, written = read_with_pdfium(original), read_with_pdfium(rewrite)
    if seen is None or written is None:
        return Agreement(SECOND_READER_REFUSED)
    if seen.document != written.document:
        # JavaScript, attachments or a form only one reading has: the checks
        # ran on qpdf's reading, and a pdfium viewer would run the other.
        return Agreement(AMBIGUOUS_CONTENT)
    if not differing_pages(seen, written):
        return Agreement()
    seen, written = read_with_pdfium(original), read_with_pdfium(rewrite)
    if seen is None or written is None:
        return Agreement(SECOND_READER_REFUSED)
    pages = differing_pages(seen, written)
    return Agreement(AMBIGUOUS_CONTENT, pages) if pages else Agreement()


def plain_agreement(path: str) -> Agreement:
    """``agreement`` for an intact file: qpdf's plain reading of it (what the
    assembler would copy) written beside it, compared, and removed."""
    import pikepdf

    with scratch_beside(path, ".reading") as scratch:
        with pikepdf.open(path, attempt_recovery=False, inherit_page_attributes=False) as pdf:
            save_pdf(
                pdf,
                scratch,
                compress_streams=False,
                stream_decode_level=pikepdf.StreamDecodeLevel.none,
                object_stream_mode=pikepdf.ObjectStreamMode.preserve,
            )
        return agreement(path, scratch)
