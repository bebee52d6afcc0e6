"""One page of a source as a PNG image, drawn by pdfium, the independent
reader (``secondreader``), as a viewer draws it (form fields too).

Runs in a sandbox worker under its limits, on a document handed over as
bytes (an in-memory file there: ``quire.memoryfiles``): no plaintext touches
a disk on the way. The image is bounded before it is drawn (its pixels) and
after it is encoded (its bytes), so one request cannot make the worker or
the reply large.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

from quire.errors import FailedPrecondition, FieldViolation, InvalidInput
from quire.reasons import ReasonCode
from quire.validator.secondreader import pdfium_document, pdfium_page

__all__ = ["PageImage", "MAX_PIXELS", "MAX_PNG_BYTES", "render_page"]

MAX_PIXELS = 40_000_000
"""The most pixels one image may have (a 1600-pixel-wide page 25,000 tall)."""
MAX_PNG_BYTES = 3 * 1024 * 1024
"""The most bytes one PNG may have: below gRPC's default 4 MiB reply limit."""


@dataclass(frozen=True)
class PageImage:
    """A drawn page, and the pages of the document it is one of."""

    png: bytes
    width: int
    height: int
    page_count: int


def _out_of_range(page: int, count: int) -> InvalidInput:
    return InvalidInput(
        ReasonCode.PAGE_OUT_OF_RANGE,
        f"page {page} asked of a source of {count} pages",
        (FieldViolation("page", f"1 to {count}"),),
    )


def _scale(page_width: float, width: int) -> float:
    """The scale that draws ``page_width`` points as exactly ``width`` pixels
    (pdfium rounds the bitmap's size up)."""
    scale = width / max(page_width, 1e-3)
    while math.ceil(page_width * scale) > width:
        scale = math.nextafter(scale, 0.0)
    return scale


def render_page(path: str, page: int, width: int) -> PageImage:
    """Page ``page`` (1-based) of the PDF at ``path``, ``width`` pixels wide, as
    PNG; inside a sandbox worker. PAGE_OUT_OF_RANGE for a page it does not
    have, RENDER_LIMIT_EXCEEDED for an image past the bounds above,
    MALFORMED_PDF when pdfium cannot open it."""
    import pypdfium2

    try:
        return _render(path, page, width)
    except pypdfium2.PdfiumError:
        raise FailedPrecondition(
            ReasonCode.MALFORMED_PDF, "pdfium cannot open the source"
        ) from None


def _render(path: str, page: int, width: int) -> PageImage:
    with pdfium_document(path) as document:
        count = len(document)
        if not 1 <= page <= count:
            raise _out_of_range(page, count)
        with pdfium_page(document, page - 1) as opened:
            page_width, page_height = opened.get_size()
            scale = _scale(page_width, width)
            if width * math.ceil(page_height * scale) > MAX_PIXELS:
                raise FailedPrecondition(
                    ReasonCode.RENDER_LIMIT_EXCEEDED, "the page is too tall for an image"
                )
            bitmap = opened.render(scale=scale, may_draw_forms=True)
            try:
                image = bitmap.to_pil()
            finally:
                bitmap.close()
    encoded = io.BytesIO()
    image.save(encoded, format="PNG")
    png = encoded.getvalue()
    if len(png) > MAX_PNG_BYTES:
        raise FailedPrecondition(
            ReasonCode.RENDER_LIMIT_EXCEEDED, "the page's image is too large; ask a smaller width"
        )
    return PageImage(png=png, width=image.width, height=image.height, page_count=count)
