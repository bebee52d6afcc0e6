"""PAdES signing with pyHanko, run inside a signing worker process.

The packet's digest is re-verified before signing; the signature is a single
PAdES baseline (B-B) signature over the entire file, written to a temporary
path that the signer promotes under the job's key only if no artifact exists.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from quire.asn1backport import mend
from quire.filedigest import sha256_file

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
    """The signed file a signing worker wrote: its digest and size."""

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

    mend()  # asn1crypto encodes each structure once, not hundreds of times
    if sha256_file(input_path)[0] != input_sha256:
        raise PacketDigestMismatch(input_sha256)
    if pkcs11 is not None:
        with _token_signer(pkcs11, cert_path) as token_signer:
            return _sign(input_path, output_path, token_signer, tsa_url)[0]
    files = (_identity(key_path), _identity(cert_path))
    signer = _file_signer(*files)
    reserved = None if tsa_url else _RESERVED.get(files)
    signed, reserved_now = _sign(input_path, output_path, signer, tsa_url, reserved)
    if not tsa_url:
        _RESERVED[files] = reserved_now
    return signed


_FileIdentity = tuple[str, int, int, int]


def _identity(path: str) -> _FileIdentity:
    """A file as the caches know it: replaced in place, it is a new file."""
    status = os.stat(path)
    return path, status.st_ino, status.st_size, status.st_mtime_ns


_RESERVED: dict[tuple[_FileIdentity, _FileIdentity], int] = {}
"""Per worker process: the signature space pyHanko reserved for a file key's
first packet. Without a timestamp authority, the signature container's size
does not depend on the packet, so later packets reuse the figure (which
carries pyHanko's 50 % margin) instead of paying for a dry-run signature
each time: about 40 % of the cost of signing a 12-page packet."""


@lru_cache(maxsize=8)
def _file_signer(key: _FileIdentity, cert: _FileIdentity) -> Any:
    """Each key file is loaded once per worker process."""
    from pyhanko.sign import signers

    signer = signers.SimpleSigner.load(key[0], cert[0])
    if signer is None:
        raise RuntimeError("signing key could not be loaded")
    return signer


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


def _sign(
    input_path: str,
    output_path: str,
    signer: Any,
    tsa_url: str | None,
    bytes_reserved: int | None = None,
) -> tuple[SignedPacket, int]:
    """Sign, and return the packet with the signature space that was reserved."""
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
        signers.sign_pdf(
            writer,
            metadata,
            signer=signer,
            timestamper=timestamper,
            output=output,
            bytes_reserved=bytes_reserved,
        )
    if bytes_reserved is None:
        bytes_reserved = _reserved_in(output_path)
    digest, size = sha256_file(output_path)
    return SignedPacket(sha256=digest, size_bytes=size), bytes_reserved


def _reserved_in(signed_path: str) -> int:
    """The signature space pyHanko reserved in a packet it signed: its
    ``/Contents`` string, zero-padded to the reservation, in hex digits."""
    from pyhanko.pdf_utils.reader import PdfFileReader

    with open(signed_path, "rb") as handle:
        (signature,) = PdfFileReader(handle).embedded_signatures
        return 2 * len(signature.sig_object["/Contents"])
