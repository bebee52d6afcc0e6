"""Magic bytes of a fetched source: the same rule as the upload door.

Admission's ``typesniff`` judges an upload's first bytes before it keeps any;
a fetched source passes through the same rule before any byte is stored:

- ``application/pdf``: a PDF header where viewers find it (``quire.pdfheader``);
- ``application/json``: the first byte after an optional UTF-8 byte-order
  mark and JSON whitespace is ``{`` or ``[``.

A declared type without a rule passes here and is judged by the validator's
sandbox, as an upload is. (Admission's ``typesniff`` could import this
module's rule once it lives in ``libs/core``; both must stay the same.)
"""

from __future__ import annotations

from collections.abc import Callable

from quire.pdfheader import HEADER_SNIFF_BYTES, HEADER_WINDOW, has_pdf_header

__all__ = ["SNIFF_BYTES", "PDF", "JSON", "looks_like"]

PDF = "application/pdf"
JSON = "application/json"
SNIFF_BYTES = HEADER_SNIFF_BYTES
"""How many leading bytes the rule reads (fewer when the body is shorter)."""

_UTF8_BOM = b"\xef\xbb\xbf"
_JSON_WHITESPACE = b" \t\r\n"


def _pdf(head: bytes) -> bool:
    return has_pdf_header(head[:SNIFF_BYTES])


def _json(head: bytes) -> bool:
    text = head[:HEADER_WINDOW].removeprefix(_UTF8_BOM).lstrip(_JSON_WHITESPACE)
    return text[:1] in (b"{", b"[")


_RULES: dict[str, Callable[[bytes], bool]] = {PDF: _pdf, JSON: _json}


def looks_like(content_type: str, head: bytes) -> bool:
    """Whether ``head`` (a body's first ``SNIFF_BYTES``, or all of a shorter
    one) may be of ``content_type``."""
    rule = _RULES.get(content_type)
    return rule is None or rule(head)
