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

An intact file that hides a body from its cross-reference table
(``revisions``) is ambiguous before any reading: a reader that rebuilds
the table takes that body, and pdfium's agreement with qpdf on the file as
it is says nothing of that reading.

A page content stream whose bytes run through an ``endstream``/``endobj``
pair is refused before any of this (``masked_stream``): its ``/Length``
says one thing and its keywords another, and the readers that trust the
keywords (poppler among them) show other text than the readers that trust
the length (qpdf and pdfium alike), so comparing those two would not catch it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from quire.memoryfiles import save_pdf, scratch_beside
from quire.validator.pdfgraph import PdfGraph
from quire.validator.revisions import Bodies
from quire.validator.secondreader import differing_actions, differing_pages, read_with_pdfium

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


def readings(path: str, pdf: Any = None, graph: PdfGraph | None = None) -> tuple[bool, bool]:
    """Whether an intact file's structure admits two readings (more than one
    ``%PDF-`` header, or an object number defined twice with different
    bodies), and whether it hides a body from qpdf's cross-reference table
    (``revisions``; judged only with ``pdf``, the file open in pikepdf, and
    the ``graph`` of its objects). One read of the file serves both."""
    with open(path, "rb") as handle:
        data = handle.read()
    bodies = Bodies(data)
    two = len(_HEADER.findall(data)) > 1 or bodies.differ()
    if pdf is None or graph is None:
        return two, False
    return two, bodies.hidden(
        pdf.get_xref_table(), graph.direct_length, partial(_object_stream_data, pdf)
    )


def _object_stream_data(pdf: Any, number: int) -> bytes:
    """An object stream's decoded data (its size measured already); empty when
    it does not read."""
    import pikepdf

    try:
        stream = pdf.get_object((number, 0))
        return bytes(stream.read_bytes()) if isinstance(stream, pikepdf.Stream) else b""
    except pikepdf.PdfError:
        return b""


def two_readings(path: str) -> bool:
    """``readings``' first answer."""
    return readings(path)[0]


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


def agreement(original: str, rewrite: str, *, actions: bool = True) -> Agreement:
    """pdfium's reading of ``original`` against its reading of ``rewrite``.

    With ``actions``, what each does beyond drawing must agree too
    (``differing_actions``); a signed packet, which adds its signature's
    field, is compared without.

    pdfium draws the first glyphs of a substituted font slightly differently
    from later ones in the same process, so pages that differ are read again
    once (both files, caches now warm) before they count as different."""
    seen, written = read_with_pdfium(original), read_with_pdfium(rewrite)
    if seen is None or written is None:
        return Agreement(SECOND_READER_REFUSED)
    if actions:
        # JavaScript, attachments, a form or annotations only one reading has:
        # the checks ran on qpdf's reading, and a pdfium viewer would act on
        # the other.
        acting = differing_actions(seen, written)
        if acting is None or acting:
            return Agreement(AMBIGUOUS_CONTENT, acting or ())
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
