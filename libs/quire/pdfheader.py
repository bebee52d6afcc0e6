"""Where a PDF header is, found as viewers find it.

Viewers (and qpdf) look for the header within the first 1,024 bytes, so a file
preceded by a few bytes of junk, a byte-order mark or whitespace still opens,
and many also take ``%PDF1.4`` without the dash. The rule here is that and no
looser: ``%PDF``, an optional ``-``, then a version ``digit.digit``, the whole
header inside the first ``HEADER_WINDOW`` bytes. A file that merely contains
``%PDF`` further in is not a PDF.

Both gates use it: admission's first look at an upload and the validator's
content sniff, so what one accepts the other does not refuse as a type.
"""

from __future__ import annotations

import re

__all__ = ["HEADER_WINDOW", "has_pdf_header", "pdf_header_offset"]

HEADER_WINDOW = 1024
"""Viewers look for the header in this many leading bytes."""

_HEADER = re.compile(rb"%PDF-?[0-9]\.[0-9]")


def pdf_header_offset(head: bytes) -> int | None:
    """The offset of the first PDF header within the first ``HEADER_WINDOW``
    bytes of ``head``, or ``None`` when there is none."""
    found = _HEADER.search(head, 0, HEADER_WINDOW)
    return None if found is None else found.start()


def has_pdf_header(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) carries a PDF header where viewers look."""
    return pdf_header_offset(head) is not None
