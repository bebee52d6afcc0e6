"""Checking a signed packet: the signature is intact, covers the whole file,
and was made by a certificate the caller trusts. Used by the signer (to reuse
an artifact left by a crash) and by ``quire verify``; CPU-bound, so callers
run it in a worker process or a CLI, never on an event loop.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["SignatureReport", "UnreadablePdf", "verify_signed_pdf", "certificate_sha256"]


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

    @property
    def ok(self) -> bool:
        return (
            self.signature_count == 1
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


class UnreadablePdf(ValueError):
    """The file is not a PDF whose signature can be read: no header, a broken
    structure, bytes changed where the reader needs them. Nothing of the
    file's content is in the message."""


def verify_signed_pdf(path: str, trusted_pems: list[str]) -> SignatureReport:
    """Validate the single signature of ``path`` against ``trusted_pems``;
    ``UnreadablePdf`` when the file cannot be read as a PDF at all."""
    from pyhanko.pdf_utils.misc import PdfError

    try:
        return _verify(path, trusted_pems)
    except (PdfError, ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
        # A hostile or damaged file breaks the reader in many ways; each is a "no".
        raise UnreadablePdf(f"not a readable signed PDF ({type(error).__name__})") from None


def _verify(path: str, trusted_pems: list[str]) -> SignatureReport:
    from asn1crypto import pem as asn1_pem
    from asn1crypto import x509 as asn1_x509
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko.sign.validation.status import SignatureCoverageLevel
    from pyhanko_certvalidator import ValidationContext

    roots = []
    for pem_text in trusted_pems:
        _kind, _headers, der = asn1_pem.unarmor(pem_text.encode())
        roots.append(asn1_x509.Certificate.load(der))
    with open(path, "rb") as handle:
        reader = PdfFileReader(handle, strict=False)
        signatures = reader.embedded_signatures
        if len(signatures) != 1:
            return SignatureReport(len(signatures), False, False, False, False, "", "")
        embedded = signatures[0]
        status = validate_pdf_signature(embedded, ValidationContext(trust_roots=roots))
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
