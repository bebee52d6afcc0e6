"""Sealed blobs: AES-256-GCM in segments, so a blob of any size streams.

A sealed blob is a header followed by segments (the STREAM construction of
Hoang, Reyhanitabar, Rogaway and Vizár, as in Tink's streaming AEAD)::

    header  = "QSB1" | u32 segment size | u32 data-key version
              | 7-byte random nonce prefix | u16 tenant length | tenant (UTF-8)
    segment = AES-GCM(data key, nonce = prefix | u32 index | last flag,
                      plaintext of segment-size bytes (the last: 0..size),
                      associated data = header)

Every segment is authenticated together with the header, its position and
whether it is the last, so a blob that was edited, truncated, extended,
reordered, or moved to another tenant fails to open. The header names the
tenant and the version of its data key (``quire.datakeys``); it holds no
key material. Digests stay over the plaintext.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from quire.errors import PermanentError
from quire.reasons import ReasonCode

__all__ = ["MAGIC", "SEGMENT_BYTES", "SealedHeader", "Sealer", "open_sealed", "read_header"]

MAGIC = b"QSB1"
SEGMENT_BYTES = 64 * 1024
TAG_BYTES = 16
PREFIX_BYTES = 7
MAX_SEGMENTS = 2**32
_FIXED = struct.Struct(">4sII7sH")


def _corrupt() -> PermanentError:
    return PermanentError(ReasonCode.DIGEST_MISMATCH, "stored blob does not match digest")


@dataclass(frozen=True)
class SealedHeader:
    tenant: str
    key_version: int
    prefix: bytes
    segment_bytes: int = SEGMENT_BYTES

    def encode(self) -> bytes:
        tenant = self.tenant.encode()
        fixed = _FIXED.pack(MAGIC, self.segment_bytes, self.key_version, self.prefix, len(tenant))
        return fixed + tenant

    def nonce(self, index: int, last: bool) -> bytes:
        if index >= MAX_SEGMENTS:
            raise PermanentError(ReasonCode.SIZE_LIMIT_EXCEEDED, "blob too large to seal")
        return self.prefix + struct.pack(">IB", index, 1 if last else 0)


def read_header(handle: BinaryIO) -> SealedHeader:
    """The header at the start of ``handle``; DIGEST_MISMATCH if it is not one."""
    fixed = handle.read(_FIXED.size)
    if len(fixed) != _FIXED.size:
        raise _corrupt()
    magic, segment, version, prefix, length = _FIXED.unpack(fixed)
    tenant = handle.read(length)
    if magic != MAGIC or not 0 < segment <= 16 * SEGMENT_BYTES or len(tenant) != length:
        raise _corrupt()
    try:
        name = tenant.decode()
    except UnicodeDecodeError:
        raise _corrupt() from None
    return SealedHeader(tenant=name, key_version=version, prefix=prefix, segment_bytes=segment)


class Sealer:
    """Seals a stream of plaintext written in pieces of any size.

    ``update`` returns the sealed bytes ready so far; ``finish`` the rest.
    The last full segment is held back until more plaintext or the end
    arrives, because only then is it known whether it is the last.
    """

    def __init__(self, tenant: str, key_version: int, key: bytes) -> None:
        self.header = SealedHeader(tenant, key_version, os.urandom(PREFIX_BYTES))
        self._aad = self.header.encode()
        self._aead = AESGCM(key)
        self._pending = bytearray()
        self._index = 0
        self._started = False

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return self._aad

    def update(self, data: bytes) -> bytes:
        out = [self._start()]
        self._pending += data
        size = self.header.segment_bytes
        while len(self._pending) > size:
            out.append(self._seal(bytes(self._pending[:size]), last=False))
            del self._pending[:size]
        return b"".join(out)

    def finish(self) -> bytes:
        head = self._start()
        return head + self._seal(bytes(self._pending), last=True)

    def _seal(self, plain: bytes, *, last: bool) -> bytes:
        nonce = self.header.nonce(self._index, last)
        self._index += 1
        return self._aead.encrypt(nonce, plain, self._aad)


def open_sealed(handle: BinaryIO, header: SealedHeader, key: bytes) -> Iterator[bytes]:
    """The plaintext segments after ``header`` (already read from ``handle``).

    Raises DIGEST_MISMATCH for a segment that does not authenticate,
    including a blob cut short at a segment boundary (its new last segment
    was not sealed as the last).
    """
    aead = AESGCM(key)
    aad = header.encode()
    sealed_size = header.segment_bytes + TAG_BYTES
    index = 0
    current = handle.read(sealed_size)
    while True:
        following = handle.read(sealed_size) if len(current) == sealed_size else b""
        last = not following
        if len(current) < TAG_BYTES:
            raise _corrupt()
        try:
            yield aead.decrypt(header.nonce(index, last), current, aad)
        except InvalidTag:
            raise _corrupt() from None
        if last:
            return
        index += 1
        current = following
