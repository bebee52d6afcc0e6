"""Where a PDF header is, found as viewers find it.

Viewers (and qpdf) look for the header within the first 1,024 bytes, so a file
preceded by a few bytes of junk, a byte-order mark or whitespace still opens.
They read the version as advice, however it is spelt: ``%PDF1.4`` without the
dash, ``%PDF.1.4`` and ``%PDF-14`` all open (qpdf, poppler, pdf.js). The rule
here: ``%PDF``, at most one ``-`` or ``.``, then a version of digits and dots
(one to eight characters, starting with a digit; what follows it is not
read), the whole header inside the first ``HEADER_WINDOW`` bytes. ``%PDF`` alone, ``%PDF--1.4``, ``%PDF-X.Y`` or a file
that merely contains ``%PDF`` further in is not a PDF. The packet always gets
a clean header: the assembler writes a new file.

Both gates use it: admission's first look at an upload and the validator's
content sniff, so what one accepts the other does not refuse as a type.
"""

from __future__ import annotations

import re

__all__ = ["HEADER_SNIFF_BYTES", "HEADER_WINDOW", "has_pdf_header", "pdf_header_offset"]

HEADER_WINDOW = 1024
"""Viewers look for the header in this many leading bytes."""

_HEADER = re.compile(rb"%PDF[-.]?[0-9][0-9.]{0,7}(?![0-9.])")
_LONGEST = len(b"%PDF-") + 8
HEADER_SNIFF_BYTES = HEADER_WINDOW + _LONGEST
"""How many leading bytes to hand ``has_pdf_header``: a header's length past
the window, so that a version cut off at the window's edge is not taken for a
whole one."""


def pdf_header_offset(head: bytes) -> int | None:
    """The offset of the first PDF header within the first ``HEADER_WINDOW``
    bytes of ``head``, or ``None`` when there is none."""
    found = _HEADER.search(head, 0, HEADER_SNIFF_BYTES)
    return None if found is None or found.end() > HEADER_WINDOW else found.start()


def has_pdf_header(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) carries a PDF header where viewers look."""
    return pdf_header_offset(head) is not None
