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

A page content stream whose bytes run through an ``endstream``/``endobj``
pair is refused before any of this (``masked_stream``): its ``/Length``
says one thing and its keywords another, and the readers that trust the
keywords (poppler among them) show other text than the readers that trust
the length (qpdf and pdfium alike), so comparing those two would not catch it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from quire.memoryfiles import save_pdf, scratch_beside
from quire.validator.repair import revisions_disagree
from quire.validator.secondreader import differing_pages, read_with_pdfium

__all__ = [
    "AMBIGUOUS_CONTENT",
    "SECOND_READER_REFUSED",
    "Agreement",
    "agreement",
    "masked_stream",
    "plain_agreement",
    "two_readings",
]

AMBIGUOUS_CONTENT = "AMBIGUOUS_CONTENT"
SECOND_READER_REFUSED = "SECOND_READER_REFUSED"
_HEADER = re.compile(rb"%PDF-\d")
_KEYWORDS_INSIDE = re.compile(rb"endstream\s+endobj\b")
READ_CHUNK = 4 * 1024 * 1024


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


def _headers(path: str) -> int:
    count, tail = 0, b""
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            window = tail + chunk
            count += len(_HEADER.findall(window)) - len(_HEADER.findall(tail))
            tail = window[-8:]
    return count


def two_readings(path: str) -> bool:
    """Whether an intact file's structure admits two readings: more than one
    ``%PDF-`` header, or an object number defined twice with different bodies."""
    return _headers(path) > 1 or revisions_disagree(path)


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
