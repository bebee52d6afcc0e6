"""A second reader, pdfium, that shares none of qpdf's recovery.

qpdf opens every source and writes every repair; the assembler and the
signer read what qpdf wrote. Where a file can be read two ways (its
cross-reference table rebuilt, a stream's end guessed, more than one
header, an object defined twice), qpdf's reading is only one guess, and a
viewer built on another engine may show other text. pdfium (Chrome's
reader, through ``pypdfium2``) reads the original with its own parser and
its own recovery, and reads qpdf's rewrite too: page count, each page's
text and a small raster of each page must agree, or the file is ambiguous
(``faithfulness``). Runs in the sandbox worker, under its limits; nothing
read here (text, pixels) leaves it, only digests and page numbers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["PageView", "Reading", "differing_pages", "read_with_pdfium"]

RASTER_SIDE = 96
"""The longer side of each page's raster, in pixels: enough to tell a blank
page from a written one and a moved block from a kept one, cheap enough to
draw every page of a large file (about a millisecond a page)."""


@dataclass(frozen=True)
class PageView:
    text: bytes
    """sha256 of the page's text as pdfium extracts it."""
    raster: bytes
    """sha256 of the page's grayscale raster (``RASTER_SIDE``)."""


@dataclass(frozen=True)
class Reading:
    pages: tuple[PageView, ...]


def _page_view(page: object) -> PageView:
    width, height = page.get_size()  # type: ignore[attr-defined]
    scale = RASTER_SIDE / max(width, height, 1.0)
    textpage = page.get_textpage()  # type: ignore[attr-defined]
    try:
        text = textpage.get_text_range()
    finally:
        textpage.close()
    bitmap = page.render(scale=scale, grayscale=True, may_draw_forms=False)  # type: ignore[attr-defined]
    try:
        raster = hashlib.sha256(bytes(bitmap.buffer)).digest()
    finally:
        bitmap.close()
    return PageView(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(), raster)


def read_with_pdfium(path: str) -> Reading | None:
    """pdfium's view of ``path``: one ``PageView`` per page; None when pdfium
    cannot open it (damage its recovery does not mend, or a password)."""
    import pypdfium2  # lazy: only sandbox workers load pdfium

    try:
        document = pypdfium2.PdfDocument(path)
    except pypdfium2.PdfiumError:
        return None
    try:
        views = []
        for index in range(len(document)):
            page = document[index]
            try:
                views.append(_page_view(page))
            finally:
                page.close()
        return Reading(tuple(views))
    except pypdfium2.PdfiumError:
        return None
    finally:
        document.close()


def differing_pages(original: Reading, rewrite: Reading) -> tuple[int, ...]:
    """The 1-based pages whose text or raster differ, and every page one
    reading has and the other lacks."""
    common = min(len(original.pages), len(rewrite.pages))
    differ = [
        number + 1
        for number, (seen, written) in enumerate(zip(original.pages, rewrite.pages, strict=False))
        if seen != written
    ]
    longer = max(len(original.pages), len(rewrite.pages))
    return tuple(differ + list(range(common + 1, longer + 1)))
