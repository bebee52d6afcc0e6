"""PAdES signing with pyHanko, run inside a signing worker process.

The packet's digest is re-verified before signing; the signature is a single
PAdES baseline (B-B) signature over the entire file, written to a temporary
path that the signer promotes under the job's key only if no artifact exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from quire.blobstore import sha256_file

__all__ = ["SignedPacket", "sign_packet", "PacketDigestMismatch", "SIGNATURE_FIELD"]

SIGNATURE_FIELD = "QuireSignature"


class PacketDigestMismatch(Exception):
    """The assembled packet no longer matches its digest."""


@dataclass(frozen=True)
class SignedPacket:
    sha256: str
    size_bytes: int


def sign_packet(
    input_path: str,
    input_sha256: str,
    output_path: str,
    key_path: str,
    cert_path: str,
    tsa_url: str | None = None,
) -> SignedPacket:
    """PAdES B-B, or B-T when a timestamp authority is given."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers
    from pyhanko.sign.timestamps import HTTPTimeStamper

    if sha256_file(input_path)[0] != input_sha256:
        raise PacketDigestMismatch(input_sha256)
    signer = signers.SimpleSigner.load(key_path, cert_path)
    if signer is None:
        raise RuntimeError("signing key could not be loaded")
    metadata = signers.PdfSignatureMetadata(
        field_name=SIGNATURE_FIELD,
        md_algorithm="sha256",
        subfilter=fields.SigSeedSubFilter.PADES,
        reason="Quire packet signature",
    )
    with open(input_path, "rb") as source, open(output_path, "wb") as output:
        writer = IncrementalPdfFileWriter(source, strict=False)
        timestamper = HTTPTimeStamper(tsa_url, timeout=10) if tsa_url else None
        signers.sign_pdf(writer, metadata, signer=signer, timestamper=timestamper, output=output)
    digest, size = sha256_file(output_path)
    return SignedPacket(sha256=digest, size_bytes=size)
