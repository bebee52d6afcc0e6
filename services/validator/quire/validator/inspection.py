"""Inspection of one untrusted source, run inside a sandbox worker process.

Nothing here trusts the declaration: the bytes are re-hashed against the
digest they were accepted under, the type is sniffed from the content (a PDF
by its header, found where viewers look for it, ``quire.pdfheader``; anything
else by libmagic), and PDFs are opened by qpdf (through pikepdf) *without*
recovery. A file that needs recovery is never silently reinterpreted: either
the ruleset refuses repairs, or ``repair`` rewrites it and every check runs
again on the rewrite, whose digest the ledger records — two viewers must never
disagree about what a signed contract says. Returns a plain finding
(picklable, no document text).
"""

from __future__ import annotations

import hashlib
import os
import zlib
from dataclasses import dataclass, fields, replace
from functools import lru_cache

from quire.pdfheader import pdf_header_offset
from quire.reasons import ReasonCode
from quire.validator.damage import codes_of
from quire.validator.encryption import encryption_refusal
from quire.validator.faithfulness import (
    AMBIGUOUS_CONTENT,
    Agreement,
    agreement,
    masked_stream,
    plain_agreement,
    readings,
)
from quire.validator.pdfchecks import UNREPAIRABLE_SHAPES, PdfLimits, check_pdf
from quire.validator.pdfcycles import find_cycle
from quire.validator.pdfgraph import PdfGraph
from quire.validator.rawbombs import inflates_past
from quire.validator.repair import claimed_pages, repair_pdf

__all__ = ["Finding", "inspect_source", "PDF_TYPE", "JSON_TYPE"]

PDF_TYPE = "application/pdf"
JSON_TYPE = "application/json"
UNKNOWN_TYPE = "application/octet-stream"
SNIFF_BYTES = 64 * 1024
READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Finding:
    """What inspecting one source found: its type, its pages, and the reason to
    refuse it (empty when it passed). Plain and picklable; no document text."""

    detected_type: str
    page_count: int
    reason: str
    """Empty when the source passed."""
    detail: str = ""
    """A stable sub-code of ``reason`` (``MALFORMED_PDF``: why no repair)."""
    warnings: tuple[str, ...] = ()
    """Damage codes (``damage``) of a repaired or refused damaged PDF."""
    normalized_sha256: str = ""
    """Set when the source was repaired: the digest of the rewrite."""
    normalized_size: int = 0
    differing_pages: tuple[int, ...] = ()
    """Pages a second reader read differently (``faithfulness``): the reason
    the source was refused, or (ruleset policy "review") parked."""

    @property
    def repaired(self) -> bool:
        return bool(self.normalized_sha256)

    def as_record(self) -> dict[str, object]:
        """The fields by name, as ``dataclasses.asdict`` gives them (each a
        plain value or a tuple of them), without its deep copy."""
        return {name: getattr(self, name) for name in _FINDING_FIELDS}


_FINDING_FIELDS = tuple(f.name for f in fields(Finding))


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


@dataclass(frozen=True)
class _Strict:
    pages: int
    reason: str
    damaged: bool = False
    """qpdf would not open the file without recovery, or warned: a repair may help."""
    messages: tuple[str, ...] = ()
    detail: str = ""
    differing_pages: tuple[int, ...] = ()
    tolerated: tuple[str, ...] = ()
    """Damage codes of what the strict checks' own decoders tolerated."""
    two_readings: bool = False
    """A file that passed admits two readings (``faithfulness.readings``)."""
    hidden_revision: bool = False
    """A file that passed hides a body from its cross-reference table."""


def _strict(path: str, limits: PdfLimits, *, rewrite: bool = False) -> _Strict:
    """Open ``path`` without recovery and run every check. Damage the
    decoders tolerate (a Flate checksum) sends an upload to the repair, so
    that its code is recorded with the rewrite; on the ``rewrite`` it passes."""
    import pikepdf  # lazy: heavy, and only needed in the sandbox

    try:
        # Page attributes are not pushed down at open: that walks the page tree,
        # and a tree that loops must be found (find_cycle) before anything walks it.
        with pikepdf.open(path, attempt_recovery=False, inherit_page_attributes=False) as pdf:
            if pdf.is_encrypted:
                return _Strict(0, ReasonCode.ENCRYPTED_PDF)
            # Every object read once; the walks below run over what was read. A
            # file with more objects than the limit is not walked at all:
            # check_pdf refuses it for its size.
            graph = PdfGraph.read(pdf, limits.max_objects)
            if graph.complete and find_cycle(pdf, graph) is not None:
                return _Strict(0, ReasonCode.CYCLIC_STRUCTURE)  # before anything else walks it
            pages = len(pdf.pages)
            if masked := masked_stream(pdf):
                return _Strict(
                    pages,
                    ReasonCode.MALFORMED_PDF,
                    detail=AMBIGUOUS_CONTENT,
                    differing_pages=masked,
                )
            if messages := pdf.get_warnings():
                return _Strict(pages, ReasonCode.MALFORMED_PDF, True, tuple(messages))
            if claimed_pages(pdf) not in (None, pages):
                return _Strict(pages, ReasonCode.MALFORMED_PDF, detail="PAGE_COUNT_MISMATCH")
            checked = check_pdf(pdf, limits, graph)
            if checked.damage and not checked.reason:
                if rewrite:
                    return _Strict(checked.pages, "", tolerated=checked.damage)
                return _Strict(
                    checked.pages, ReasonCode.MALFORMED_PDF, True, tolerated=checked.damage
                )
            # check_pdf's MALFORMED_PDF may be damage qpdf warned about deeper in
            # the file (an object's stream length, say): a repair decides. A
            # hostile shape (too deep, too many objects) is not damage.
            damaged = (
                checked.reason == ReasonCode.MALFORMED_PDF
                and checked.detail not in UNREPAIRABLE_SHAPES
            )
            two, hidden = (False, False) if checked.reason else readings(path, pdf, graph)
            return _Strict(
                checked.pages,
                checked.reason,
                damaged,
                detail=checked.detail,
                two_readings=two,
                hidden_revision=hidden,
            )
    except pikepdf.PasswordError as error:
        return _encrypted(path, str(error), limits)
    except pikepdf.PdfError as error:
        if "encrypt" in str(error).lower():
            return _encrypted(path, str(error), limits)
        return _Strict(0, ReasonCode.MALFORMED_PDF, True, (str(error),))
    except MemoryError:
        raise  # the sandbox reports it as a limit, not as a verdict on the file
    except (zlib.error, RecursionError, ValueError, TypeError, KeyError):
        return _Strict(0, ReasonCode.MALFORMED_PDF, True)


def _encrypted(path: str, message: str, limits: PdfLimits) -> _Strict:
    reason, detail = encryption_refusal(path, message, limits.allow_active_content)
    return _Strict(0, reason, detail=detail)


def _inspect_pdf(path: str, limits: PdfLimits, normalized_path: str) -> Finding:
    """``_checked``, except that a file refused as damaged whose raw bytes
    hide a decompression bomb is refused as the bomb it is (``rawbombs``)."""
    finding = _checked(path, limits, normalized_path)
    if finding.reason == ReasonCode.MALFORMED_PDF and inflates_past(
        path, limits.max_decompressed_bytes
    ):
        return replace(
            finding,
            reason=ReasonCode.DECOMPRESSED_SIZE_EXCEEDED,
            detail="",
            normalized_sha256="",
            normalized_size=0,
        )
    return finding


def _checked(path: str, limits: PdfLimits, normalized_path: str) -> Finding:
    """The strict checks; for a damaged file, a repair into ``normalized_path``
    (none when it is empty: the ruleset refuses repairs) and the strict checks
    again on the rewrite."""
    strict = _strict(path, limits)
    if not strict.damaged:
        finding = Finding(
            PDF_TYPE,
            strict.pages,
            strict.reason,
            strict.detail,
            differing_pages=strict.differing_pages,
        )
        if strict.reason:
            return finding
        if strict.hidden_revision:
            return _faithful(finding, Agreement(AMBIGUOUS_CONTENT), limits)
        if not strict.two_readings:
            return finding
        return _faithful(finding, plain_agreement(path), limits)
    warnings = tuple(codes_of(list(strict.messages))) + strict.tolerated
    if not normalized_path:
        return Finding(PDF_TYPE, 0, ReasonCode.MALFORMED_PDF, "REPAIR_NOT_ALLOWED", warnings)
    repaired = repair_pdf(path, normalized_path)
    if repaired.reason:
        return Finding(
            PDF_TYPE, repaired.pages, repaired.reason, repaired.detail, repaired.warnings
        )
    again = _strict(normalized_path, limits, rewrite=True)
    repaired_warnings = tuple(dict.fromkeys(repaired.warnings + again.tolerated))
    if again.reason:
        detail = "REPAIR_INCOMPLETE" if again.messages else again.detail
        return Finding(PDF_TYPE, again.pages, again.reason, detail, repaired_warnings)
    digest, _head = _digest_and_head(normalized_path)
    finding = Finding(
        PDF_TYPE,
        again.pages,
        "",
        warnings=repaired_warnings,
        normalized_sha256=digest,
        normalized_size=os.path.getsize(normalized_path),
    )
    return _faithful(finding, agreement(path, normalized_path), limits)


def _faithful(finding: Finding, agreed: Agreement, limits: PdfLimits) -> Finding:
    """``finding`` as the second reader leaves it: unchanged when it agrees;
    else refused with the sub-code, or (``review_ambiguity``) passed on with
    the pages named, for an operator to decide."""
    if agreed.agrees:
        return finding
    if limits.review_ambiguity:
        return replace(
            finding,
            warnings=(*finding.warnings, agreed.detail),
            differing_pages=agreed.pages,
        )
    return replace(
        finding,
        reason=ReasonCode.MALFORMED_PDF,
        detail=agreed.detail,
        differing_pages=agreed.pages,
        normalized_sha256="",
        normalized_size=0,
    )


def _sniff_type(head: bytes) -> str:
    """The content type of a file whose first bytes are ``head``.

    A PDF is what viewers open as one: its header within the first 1,024 bytes,
    after junk, a byte-order mark or whitespace, with or without the dash
    (libmagic wants ``%PDF-`` at offset 0 and calls the rest
    ``application/octet-stream``). Anything else is libmagic's verdict, except
    that libmagic's ``application/pdf`` without such a header (``%PDF-X.Y``) is
    not taken: the PDF type is decided by the header rule alone, as at the door.
    JSON that libmagic recognises stays JSON even if a string in it reads
    ``%PDF-1.4``. A file that begins with the header is a PDF without asking
    libmagic: no JSON text begins with ``%``, so its verdict could change
    nothing (and it costs as much as opening a small PDF).
    """
    header = pdf_header_offset(head)
    if header == 0:
        return PDF_TYPE
    detected = str(_magic().from_buffer(head))  # type: ignore[attr-defined]
    if detected == JSON_TYPE:
        return detected
    if header is not None:
        return PDF_TYPE
    return UNKNOWN_TYPE if detected == PDF_TYPE else detected


def inspect_source(
    path: str,
    sha256: str,
    declared_type: str,
    limits: PdfLimits | None = None,
    normalized_path: str = "",
) -> Finding:
    """Check one source file; runs in a sandbox worker. A damaged PDF is
    repaired into ``normalized_path`` when one is given (``repair``)."""
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
    return _inspect_pdf(path, limits or PdfLimits(), normalized_path)


def inspect_sources(
    sources: list[tuple[str, str, str, PdfLimits | None, str]],
) -> list[Finding]:
    """``inspect_source`` for each of a job's sources, in order, in one
    sandbox call: (path, sha256, declared type, limits, normalized path)."""
    return [inspect_source(*source) for source in sources]


def _inspect_json(path: str) -> str:
    """A structured source must at least be one JSON object."""
    import json

    try:
        with open(path, "rb") as handle:
            value = json.load(handle)
    except (ValueError, RecursionError):
        return ReasonCode.SCHEMA_INVALID
    return "" if isinstance(value, dict) else ReasonCode.SCHEMA_INVALID
