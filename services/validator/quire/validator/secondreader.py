"""A second reader, pdfium, that shares none of qpdf's recovery.

qpdf opens every source and writes every repair; the assembler and the
signer read what qpdf wrote. Where a file can be read two ways (its
cross-reference table rebuilt, a stream's end guessed, more than one
header, an object defined twice), qpdf's reading is only one guess, and a
viewer built on another engine may show other text. pdfium (Chrome's
reader, through ``pypdfium2``) reads the original with its own parser and
its own recovery, and reads qpdf's rewrite too: page count, each page's
text, a small raster of each page and what each page and the document do
beyond drawing (annotations and their link actions; document JavaScript,
attachments, forms) must agree, or the file is ambiguous
(``faithfulness``): a viewer would show, or run, what was never checked. Runs in the sandbox worker, under its limits; nothing
read here (text, pixels) leaves it, only digests and page numbers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PageView",
    "Reading",
    "differing_actions",
    "differing_pages",
    "pdfium_document",
    "pdfium_page",
    "read_with_pdfium",
    "visible_change",
]

RASTER_SIDE = 96
"""The longer side of each page's raster, in pixels: enough to tell a blank
page from a written one and a moved block from a kept one, cheap enough to
draw every page of a large file (about a millisecond a page)."""


@dataclass(frozen=True)
class PageView:
    """One page as pdfium reads it, kept only as digests."""

    text: bytes
    """sha256 of the page's text as pdfium extracts it."""
    raster: bytes
    """sha256 of the page's grayscale raster (``RASTER_SIDE``)."""
    annotations: tuple[tuple[int, int], ...] = field(default=(), compare=False)
    """Each annotation's subtype and, for a link, its action's type (pdfium's
    numbers; -1 when it has none). Not part of what the page shows
    (``differing_pages``): ``differing_actions`` compares them."""


@dataclass(frozen=True)
class Reading:
    """pdfium's reading of one file, page by page."""

    pages: tuple[PageView, ...]
    document: tuple[int, int, int] = (0, 0, 0)
    """Document JavaScript actions, attachments, and the form type."""


def _page_view(page: object) -> PageView:
    width, height = page.get_size()  # type: ignore[attr-defined]
    scale = RASTER_SIDE / max(width, height, 1.0)
    textpage = page.get_textpage()  # type: ignore[attr-defined]
    try:
        text = textpage.get_text_range()
    finally:
        textpage.close()
    pixels = _raster(page, scale)
    return PageView(
        hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(),
        hashlib.sha256(pixels).digest(),
        _annotations(page),
    )


def _annotations(page: Any) -> tuple[tuple[int, int], ...]:
    import pypdfium2.raw as pdfium

    found = []
    for index in range(pdfium.FPDFPage_GetAnnotCount(page.raw)):
        annotation = pdfium.FPDFPage_GetAnnot(page.raw, index)
        if not annotation:
            found.append((-1, -1))
            continue
        try:
            link = pdfium.FPDFAnnot_GetLink(annotation)
            action = pdfium.FPDFLink_GetAction(link) if link else None
            kind = pdfium.FPDFAction_GetType(action) if action else -1
            found.append((pdfium.FPDFAnnot_GetSubtype(annotation), kind))
        finally:
            pdfium.FPDFPage_CloseAnnot(annotation)
    return tuple(found)


def _document(document: Any) -> tuple[int, int, int]:
    import pypdfium2.raw as pdfium

    return (
        pdfium.FPDFDoc_GetJavaScriptActionCount(document.raw),
        pdfium.FPDFDoc_GetAttachmentCount(document.raw),
        pdfium.FPDF_GetFormType(document.raw),
    )


def _raster(page: object, scale: float) -> bytes:
    """The page drawn as a viewer draws it (form fields too), in grayscale."""
    bitmap = page.render(scale=scale, grayscale=True, may_draw_forms=True)  # type: ignore[attr-defined]
    try:
        return bytes(bitmap.buffer)
    finally:
        bitmap.close()


@contextmanager
def pdfium_document(path: str) -> Iterator[Any]:
    """pdfium's document for ``path``, forms loaded as a viewer loads them,
    closed on the way out whatever happens."""
    import pypdfium2

    # Opened here and handed over as a stream: pdfium's own path handling
    # resolves links, which an in-memory file's ``/proc/self/fd`` path is.
    handle = open(path, "rb")  # noqa: SIM115 - pdfium closes it with the document
    try:
        document = pypdfium2.PdfDocument(handle, autoclose=True)
    except BaseException:
        handle.close()
        raise
    try:
        document.init_forms()  # fields drawn from their values, as viewers do
        yield document
    finally:
        document.close()


@contextmanager
def pdfium_page(document: Any, index: int) -> Iterator[Any]:
    page = document[index]
    try:
        yield page
    finally:
        page.close()


def read_with_pdfium(path: str) -> Reading | None:
    """pdfium's view of ``path``: one ``PageView`` per page; None when pdfium
    cannot open it (damage its recovery does not mend, or a password)."""
    import pypdfium2  # lazy: only sandbox workers load pdfium

    try:
        with pdfium_document(path) as document:
            views = []
            for index in range(len(document)):
                with pdfium_page(document, index) as page:
                    views.append(_page_view(page))
            return Reading(tuple(views), _document(document))
    except pypdfium2.PdfiumError:
        return None


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


def differing_actions(original: Reading, rewrite: Reading) -> tuple[int, ...] | None:
    """What the two readings do beyond drawing, where it differs: None when
    the documents' own JavaScript, attachments or form differ, else the
    1-based pages whose annotations (or links' actions) differ."""
    if original.document != rewrite.document:
        return None
    return tuple(
        number + 1
        for number, (seen, written) in enumerate(zip(original.pages, rewrite.pages, strict=False))
        if seen.annotations != written.annotations
    )


DARKER = 64
"""Gray levels a pixel must move by to count as changed in ``visible_change``."""


def visible_change(original: str, other: str) -> tuple[float, ...] | None:
    """For each page, the share of its raster's pixels that moved by more than
    ``DARKER`` gray levels between ``original`` and ``other`` (1.0 for a page
    one lacks); None when pdfium cannot open either. A coarser measure than
    ``differing_pages`` for outputs that legitimately change how a page is
    built (flattened form fields), not what it shows."""
    import pypdfium2

    try:
        with ExitStack() as held:
            first = held.enter_context(pdfium_document(original))
            second = held.enter_context(pdfium_document(other))
            shares = []
            for index in range(max(len(first), len(second))):
                if index >= min(len(first), len(second)):
                    shares.append(1.0)
                    continue
                with (
                    pdfium_page(first, index) as left_page,
                    pdfium_page(second, index) as right_page,
                ):
                    width, height = left_page.get_size()
                    scale = RASTER_SIDE / max(width, height, 1.0)
                    left, right = _raster(left_page, scale), _raster(right_page, scale)
                shares.append(_moved(left, right))
            return tuple(shares)
    except pypdfium2.PdfiumError:
        return None


def _moved(left: bytes, right: bytes) -> float:
    """The share of pixels that moved by more than ``DARKER`` gray levels."""
    if left == right:
        return 0.0
    if len(left) != len(right):
        return 1.0
    moved = sum(1 for a, b in zip(left, right, strict=True) if abs(a - b) > DARKER)
    return moved / max(len(left), 1)
