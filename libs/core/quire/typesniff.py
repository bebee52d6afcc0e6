"""Magic bytes: whether a body's first bytes may be of the type it declares.

One rule for every door bytes come in by: admission applies it to an upload
before it opens a temporary file (``quire.admission.uploads.typesniff``), the
validator to a source it fetched from a source system before it stores a
byte (``quire.validator.sources.fetcher``). Deliberately small rules on at
most ``SNIFF_BYTES`` held in memory, not libmagic: nothing of a hostile body
is parsed on an event loop. The validator still sniffs every source in its
sandbox, so what passes here can still be rejected there; what fails here
could never have passed there.

- ``application/pdf``: a PDF header found as viewers find it
  (``quire.pdfheader``): ``%PDF``, an optional ``-`` or ``.`` and a version
  token, all within the first 1024 bytes, whatever precedes it (junk, a
  byte-order mark, whitespace);
- ``application/json``: the first byte after an optional UTF-8 byte-order
  mark and JSON whitespace is ``{`` or ``[``.

A declared type without a rule passes here and is judged by the validator alone.
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
