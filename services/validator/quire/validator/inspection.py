"""Inspection of one untrusted source, run inside a sandbox worker process.

Nothing here trusts the declaration: the bytes are re-hashed against the
digest they were accepted under, the type is sniffed from the content (a PDF
by its header, found where viewers look for it, ``quire.pdfheader``; anything
else by libmagic), and PDFs are opened by qpdf (through pikepdf) *without* recovery, so
a file that would need repairing is refused rather than silently
reinterpreted — two viewers must never disagree about what a signed contract
says. Returns a plain finding (picklable, no document text).
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from functools import lru_cache

from quire.pdfheader import has_pdf_header
from quire.reasons import ReasonCode
from quire.validator.pdfchecks import PdfLimits, check_pdf
from quire.validator.pdfcycles import find_cycle

__all__ = ["Finding", "inspect_source", "PDF_TYPE", "JSON_TYPE"]

PDF_TYPE = "application/pdf"
JSON_TYPE = "application/json"
UNKNOWN_TYPE = "application/octet-stream"
SNIFF_BYTES = 64 * 1024
READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Finding:
    detected_type: str
    page_count: int
    reason: str
    """Empty when the source passed."""


@lru_cache(maxsize=1)
def _magic() -> object:
    import magic  # lazy: only sandbox workers load libmagic

    return magic.Magic(mime=True)


def _digest_and_head(path: str) -> tuple[str, bytes]:
    digest = hashlib.sha256()
    head = b""
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            if len(head) < SNIFF_BYTES:
                head += chunk[: SNIFF_BYTES - len(head)]
            digest.update(chunk)
    return digest.hexdigest(), head


def _inspect_pdf(path: str, limits: PdfLimits) -> tuple[int, str]:
    import pikepdf  # lazy: heavy, and only needed in the sandbox

    try:
        # Page attributes are not pushed down at open: that walks the page tree,
        # and a tree that loops must be found (find_cycle) before anything walks it.
        with pikepdf.open(path, attempt_recovery=False, inherit_page_attributes=False) as pdf:
            if pdf.is_encrypted:
                return 0, ReasonCode.ENCRYPTED_PDF
            if find_cycle(pdf) is not None:  # before anything else walks the file
                return 0, ReasonCode.CYCLIC_STRUCTURE
            return check_pdf(pdf, limits)
    except pikepdf.PasswordError:
        return 0, ReasonCode.ENCRYPTED_PDF
    except MemoryError:
        raise  # the sandbox reports it as a limit, not as a verdict on the file
    except (pikepdf.PdfError, zlib.error, RecursionError, ValueError, TypeError, KeyError):
        return 0, ReasonCode.MALFORMED_PDF


def _sniff_type(head: bytes) -> str:
    """The content type of a file whose first bytes are ``head``.

    A PDF is what viewers open as one: its header within the first 1,024 bytes,
    after junk, a byte-order mark or whitespace, with or without the dash
    (libmagic wants ``%PDF-`` at offset 0 and calls the rest
    ``application/octet-stream``). Anything else is libmagic's verdict, except
    that libmagic's ``application/pdf`` without such a header (``%PDF-X.Y``) is
    not taken: the PDF type is decided by the header rule alone, as at the door.
    JSON that libmagic recognises stays JSON even if a string in it reads
    ``%PDF-1.4``.
    """
    detected = str(_magic().from_buffer(head))  # type: ignore[attr-defined]
    if detected == JSON_TYPE:
        return detected
    if has_pdf_header(head):
        return PDF_TYPE
    return UNKNOWN_TYPE if detected == PDF_TYPE else detected


def inspect_source(
    path: str, sha256: str, declared_type: str, limits: PdfLimits | None = None
) -> Finding:
    """Check one source file; runs in a sandbox worker."""
    try:
        actual, head = _digest_and_head(path)
    except FileNotFoundError:
        return Finding("", 0, ReasonCode.SOURCE_MISSING)
    if actual != sha256:
        return Finding("", 0, ReasonCode.DIGEST_MISMATCH)
    detected = _sniff_type(head)
    if detected != declared_type:
        return Finding(detected, 0, ReasonCode.TYPE_MISMATCH)
    if detected == JSON_TYPE:
        return Finding(detected, 0, _inspect_json(path))
    if detected != PDF_TYPE:
        return Finding(detected, 0, ReasonCode.TYPE_MISMATCH)
    pages, reason = _inspect_pdf(path, limits or PdfLimits())
    return Finding(detected, pages, str(reason))


def _inspect_json(path: str) -> str:
    """A structured source must at least be one JSON object."""
    import json

    try:
        with open(path, "rb") as handle:
            value = json.load(handle)
    except (ValueError, RecursionError):
        return ReasonCode.SCHEMA_INVALID
    return "" if isinstance(value, dict) else ReasonCode.SCHEMA_INVALID
