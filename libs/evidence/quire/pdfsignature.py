"""Checking a signed packet: the signature is intact, covers the whole file,
and was made by a certificate the caller trusts. Used by the signer (to reuse
an artifact left by a crash) and by ``quire verify``; CPU-bound, so callers
run it in a worker process or a CLI, never on an event loop.

The file may be anything (a typo'd path to a text file, a truncated
download, one flipped byte): a file that cannot be read as a signed PDF is
a report that says so (``unreadable``), never an exception out of the
parser. The reason is a fixed phrase and the parser's exception type,
never the parser's message, which may quote the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, BinaryIO

from quire.asn1backport import mend

__all__ = ["SignatureReport", "verify_signed_pdf", "certificate_sha256"]


@dataclass(frozen=True)
class SignatureReport:
    signature_count: int
    intact: bool
    valid: bool
    covers_whole_file: bool
    trusted: bool
    certificate_sha256: str
    signer_identity: str
    timestamped: bool = False
    """A signature timestamp token is embedded (PAdES B-T)."""
    unreadable: str = ""
    """Why the file could not be read as a signed PDF (empty when it could),
    e.g. ``not a readable PDF (PdfReadError)``."""

    @property
    def ok(self) -> bool:
        return (
            not self.unreadable
            and self.signature_count == 1
            and self.intact
            and self.valid
            and self.covers_whole_file
            and self.trusted
        )


def certificate_sha256(pem: str) -> str:
    """Lower-case hex sha256 of a PEM certificate's DER encoding."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    certificate = x509.load_pem_x509_certificate(pem.encode())
    return hashlib.sha256(certificate.public_bytes(Encoding.DER)).hexdigest()


def _unreadable(phrase: str, error: Exception) -> SignatureReport:
    return SignatureReport(
        0, False, False, False, False, "", "", unreadable=f"{phrase} ({type(error).__name__})"
    )


def verify_signed_pdf(path: str, trusted_pems: list[str]) -> SignatureReport:
    """Validate the single signature of ``path`` against ``trusted_pems``.

    ``OSError`` when the file cannot be opened; any content, however
    damaged, gives a report."""
    from asn1crypto import pem as asn1_pem
    from asn1crypto import x509 as asn1_x509

    mend()
    roots = []
    for pem_text in trusted_pems:
        _kind, _headers, der = asn1_pem.unarmor(pem_text.encode())
        roots.append(asn1_x509.Certificate.load(der))
    with open(path, "rb") as handle:
        return _read_and_validate(handle, roots)


def _read_and_validate(handle: BinaryIO, roots: list[Any]) -> SignatureReport:
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko_certvalidator import ValidationContext

    # A damaged file fails in the parser in many ways (PdfReadError, but also
    # ValueError, TypeError, AttributeError, decimal errors ...): hostile
    # input, so every one of them is the same answer.
    try:
        signatures = PdfFileReader(handle, strict=False).embedded_signatures
    except Exception as error:  # noqa: BLE001 - see above
        return _unreadable("not a readable PDF", error)
    if len(signatures) != 1:
        return SignatureReport(len(signatures), False, False, False, False, "", "")
    try:
        return _report(signatures[0], ValidationContext(trust_roots=roots))
    except Exception as error:  # noqa: BLE001 - see above
        return _unreadable("its signature cannot be read", error)


def _report(embedded: Any, context: Any) -> SignatureReport:
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko.sign.validation.status import SignatureCoverageLevel

    status = validate_pdf_signature(embedded, context)
    cert = embedded.signer_cert
    return SignatureReport(
        signature_count=1,
        intact=bool(status.intact),
        valid=bool(status.valid),
        covers_whole_file=status.coverage == SignatureCoverageLevel.ENTIRE_FILE,
        trusted=bool(status.trusted),
        certificate_sha256=hashlib.sha256(cert.dump()).hexdigest(),
        signer_identity=cert.subject.human_friendly,
        timestamped=status.timestamp_validity is not None,
    )
