"""Magic bytes at the door: the first bytes of an upload must look like the
type it declares, or it is refused (INVALID_ARGUMENT, ``TYPE_MISMATCH``)
before a temporary file is opened, and so before any job can name it.

Deliberately small rules on at most ``SNIFF_BYTES`` held in memory, not
libmagic: admission parses nothing of a hostile upload on its event loop. The
validator still sniffs every source in its sandbox, so what passes here can
still be rejected there; what fails here could never have passed there.

- ``application/pdf``: a PDF header found as viewers find it
  (``quire.pdfheader``): ``%PDF``, an optional ``-`` or ``.`` and a version
  token, all within the first 1024 bytes, whatever precedes it
  (junk, a byte-order mark, whitespace) — the same rule the validator applies;
- ``application/json``: the first byte after an optional UTF-8 byte-order mark
  and JSON whitespace is ``{`` or ``[``.

A declared type without a rule here passes the door and is judged by the
validator alone.
"""

from __future__ import annotations

from collections.abc import Callable

from quire.errors import FieldViolation, InvalidInput
from quire.pdfheader import HEADER_SNIFF_BYTES, HEADER_WINDOW, has_pdf_header
from quire.reasons import ReasonCode

__all__ = ["SNIFF_BYTES", "check_declared_type", "looks_like"]

SNIFF_BYTES = HEADER_SNIFF_BYTES
"""How many leading bytes the door looks at (and holds in memory until it has)."""

_UTF8_BOM = b"\xef\xbb\xbf"
_JSON_WHITESPACE = b" \t\r\n"


def _pdf(head: bytes) -> bool:
    return has_pdf_header(head[:SNIFF_BYTES])


def _json(head: bytes) -> bool:
    text = head[:HEADER_WINDOW].removeprefix(_UTF8_BOM).lstrip(_JSON_WHITESPACE)
    return text[:1] in (b"{", b"[")


_RULES: dict[str, Callable[[bytes], bool]] = {
    "application/pdf": _pdf,
    "application/json": _json,
}


def looks_like(content_type: str, head: bytes) -> bool:
    """Whether ``head`` (an upload's first bytes) may be of ``content_type``."""
    rule = _RULES.get(content_type)
    return rule is None or rule(head)


def check_declared_type(content_type: str, head: bytes) -> None:
    """Refuse (``TYPE_MISMATCH``) an upload whose first bytes are not its declared type."""
    if not looks_like(content_type, head):
        raise InvalidInput(
            ReasonCode.TYPE_MISMATCH,
            "the first bytes are not of the declared content type",
            (FieldViolation("header.content_type", "does not match the content"),),
        )
