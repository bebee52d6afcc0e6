"""PAdES signing with pyHanko, run inside a signing worker process.

The packet's digest is re-verified before signing; the signature is a single
PAdES baseline (B-B) signature over the entire file, written to a temporary
path that the signer promotes under the job's key only if no artifact exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quire.blobstore import sha256_file

__all__ = ["SignedPacket", "sign_packet", "PacketDigestMismatch", "SIGNATURE_FIELD", "Pkcs11Key"]

SIGNATURE_FIELD = "QuireSignature"


class PacketDigestMismatch(Exception):
    """The assembled packet no longer matches its digest."""


@dataclass(frozen=True)
class Pkcs11Key:
    """A signing key that lives in a PKCS#11 token and never leaves it."""

    module: str
    """Path of the PKCS#11 library, e.g. SoftHSM2's ``libsofthsm2.so``."""
    token_label: str
    key_label: str
    pin: str = field(repr=False)
    raw_mechanism: bool = True
    """Hash in Quire and ask the token only for raw ECDSA, which every token
    (SoftHSM2 included) implements."""


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
    pkcs11: Pkcs11Key | None = None,
) -> SignedPacket:
    """PAdES B-B, or B-T when a timestamp authority is given; the key is read
    from ``key_path`` or used inside a PKCS#11 token."""
    from pyhanko.sign import signers

    if sha256_file(input_path)[0] != input_sha256:
        raise PacketDigestMismatch(input_sha256)
    if pkcs11 is not None:
        with _token_signer(pkcs11, cert_path) as token_signer:
            return _sign(input_path, output_path, token_signer, tsa_url)
    signer = signers.SimpleSigner.load(key_path, cert_path)
    if signer is None:
        raise RuntimeError("signing key could not be loaded")
    return _sign(input_path, output_path, signer, tsa_url)


@contextmanager
def _token_signer(key: Pkcs11Key, cert_path: str) -> Iterator[Any]:
    from asn1crypto import pem, x509
    from pyhanko.config.pkcs11 import TokenCriteria
    from pyhanko.sign.pkcs11 import PKCS11Signer, open_pkcs11_session

    data = Path(cert_path).read_bytes()
    certificate = x509.Certificate.load(pem.unarmor(data)[2] if pem.detect(data) else data)
    session = open_pkcs11_session(
        key.module, token_criteria=TokenCriteria(label=key.token_label), user_pin=key.pin
    )
    try:
        yield PKCS11Signer(
            session,
            key_label=key.key_label,
            signing_cert=certificate,
            use_raw_mechanism=key.raw_mechanism,
        )
    finally:
        session.close()


def _sign(input_path: str, output_path: str, signer: Any, tsa_url: str | None) -> SignedPacket:
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers
    from pyhanko.sign.timestamps import HTTPTimeStamper

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
