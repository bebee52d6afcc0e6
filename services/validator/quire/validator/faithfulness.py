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

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quire.memoryfiles import save_pdf, scratch_beside
from quire.validator.repair import bodies_differ, body_digest, object_header_spans
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
_STREAM = re.compile(rb"stream(?:\r\n|\n|\r)")
_XREF_STREAM = re.compile(rb"/Type\s*/XRef(?![A-Za-z0-9])")
_DICTIONARY_BYTES = 4096
"""How much of a body is searched for a cross-reference stream's type."""


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


def readings(path: str, pdf: Any = None) -> tuple[bool, bool]:
    """Whether an intact file's structure admits two readings (more than one
    ``%PDF-`` header, or an object number defined twice with different
    bodies), and whether a revision is hidden from the cross-reference table
    of ``pdf`` (the file open in pikepdf; not judged without it): some object
    defined again, differently, later in the file than the body the table
    names (for an object kept in an object stream, later than that stream),
    or a body no entry names at all.

    Later revisions come later in a file: an incremental update appends its
    bodies and a table that names them, so every reader takes the last. A
    later body the table does not name is read by qpdf's table only: a
    reader that rebuilds the table (pdfium does, for entries it will not
    parse) takes that body instead, and sees a document none of the checks
    saw, with its own actions, scripts or annotations. Bodies are told by
    number alone (a later body under another generation is taken just the
    same). A header inside a stream's data (text that reads ``1 0 obj``) is
    no body: such a file is left to the second reader's comparison. One read
    and one scan of the file serve both answers."""
    with open(path, "rb") as handle:
        data = handle.read()
    spans = list(object_header_spans(data))
    bodies: dict[tuple[int, int], list[int]] = {}
    for number, generation, _start, after in spans:
        bodies.setdefault((number, generation), []).append(after)
    two = len(_HEADER.findall(data)) > 1 or bodies_differ(data, bodies)
    return two, pdf is not None and _hidden(data, spans, pdf)


def two_readings(path: str) -> bool:
    """``readings``' first answer."""
    return readings(path)[0]


def _hidden(data: bytes, spans: list[tuple[int, int, int, int]], pdf: Any) -> bool:
    table = pdf.get_xref_table()
    entries = {objgen[0]: entry for objgen, entry in table.items() if entry.type in (1, 2)}
    found: dict[int, list[tuple[int, int]]] = {}
    for number, _generation, start, after in spans:
        found.setdefault(number, []).append((start, after))
    streams = _StreamData(data, pdf, table)
    for number, bodies in found.items():
        entry = entries.get(number)
        if entry is None:
            # A body no entry names (qpdf reads the object as null), other than
            # an earlier revision's cross-reference stream, which no table lists.
            if any(
                not streams.holds(start) and not _XREF_STREAM.search(_dictionary(data, after))
                for start, after in bodies
            ):
                return True
            continue
        if entry.type == 2:  # in an object stream: a plain body after that stream is hidden
            holder = table.get((entry.obj_stream_number, 0))
            offset = holder.offset if holder is not None and holder.type == 1 else 0
            if any(start > offset and not streams.holds(start) for start, _after in bodies):
                return True
            continue
        live = next(
            (
                (start, after)
                for start, after in bodies
                if start >= entry.offset and not data[entry.offset : start].strip()
            ),
            None,
        )
        later = [body for body in bodies if body[0] > entry.offset and body != live]
        if not later:
            continue
        digest = body_digest(data, live[1]) if live is not None else None
        for start, after in later:
            if body_digest(data, after) != digest and not streams.holds(start):
                return True
    return False


def _dictionary(data: bytes, after: int) -> bytes:
    """The start of a body, up to its ``stream`` keyword if it has one."""
    head = data[after : after + _DICTIONARY_BYTES]
    keyword = _STREAM.search(head)
    return head[: keyword.start()] if keyword else head


class _StreamData:
    """Whether an offset lies in the data of a stream qpdf's table names: the
    live object just before it, read for its ``/Length`` only when asked."""

    def __init__(self, data: bytes, pdf: Any, table: Mapping[tuple[int, int], Any]) -> None:
        self._data = data
        self._pdf = pdf
        live = sorted((e.offset, objgen) for objgen, e in table.items() if e.type == 1)
        self._offsets = [offset for offset, _objgen in live]
        self._objects = [objgen for _offset, objgen in live]

    def holds(self, offset: int) -> bool:
        import pikepdf

        index = bisect.bisect_right(self._offsets, offset - 1) - 1
        if index < 0:
            return False
        begins = self._offsets[index]
        keyword = _STREAM.search(self._data, begins, offset)
        if keyword is None:
            return False
        try:
            stream = self._pdf.get_object(self._objects[index])
            if not isinstance(stream, pikepdf.Stream):
                return False
            length = int(stream.stream_dict.get("/Length", 0))
        except (pikepdf.PdfError, TypeError, ValueError):
            return False
        # The keyword found may be earlier than the real one (a string in the
        # dictionary): the span then ends earlier, inside the object all the same.
        return keyword.end() <= offset < keyword.end() + length


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
