"""One upload's bytes on their way in: the first ones held in memory until they
show the declared type (``typesniff``), so that a mis-declared upload is
refused before a temporary file is opened; then a temporary blob that stops
at the first byte past the declared size and is discarded on exit unless
promoted.
"""

from __future__ import annotations

import contextlib
from types import TracebackType

from quire.admission.uploads.typesniff import SNIFF_BYTES, check_declared_type
from quire.admission.v1 import admission_service_pb2 as pb
from quire.blobstore import BlobStore, BlobWriter
from quire.errors import InvalidInput
from quire.reasons import ReasonCode

__all__ = ["IncomingSource"]


class IncomingSource:
    """One upload's bytes: the first ones held in memory until they show the
    declared type, then a temporary blob, discarded on exit unless promoted."""

    def __init__(self, blobs: BlobStore, tenant: str, header: pb.SourceHeader) -> None:
        self._blobs = blobs
        self._tenant = tenant
        self._header = header
        self._head = bytearray()
        self._writer: BlobWriter | None = None
        self._cleanup = contextlib.ExitStack()
        self.size = 0

    def take(self, chunk: bytes) -> None:
        if self.size + len(chunk) > self._header.size_bytes:
            raise InvalidInput(ReasonCode.SIZE_EXCEEDS_DECLARATION, "more bytes than declared")
        self.size += len(chunk)
        if self._writer is not None:
            self._writer.write(chunk)
            return
        self._head += chunk
        if len(self._head) >= min(SNIFF_BYTES, self._header.size_bytes):
            self._open()

    def _open(self) -> BlobWriter:
        check_declared_type(self._header.content_type, bytes(self._head[:SNIFF_BYTES]))
        writer = self._cleanup.enter_context(
            self._blobs.writer(self._tenant, max_bytes=self._header.size_bytes)
        )
        writer.write(bytes(self._head))
        self._head = bytearray()
        self._writer = writer
        return writer

    def complete(self) -> BlobWriter:
        """The finished blob, once its size and digest are the declared ones."""
        if self.size != self._header.size_bytes:
            raise InvalidInput(ReasonCode.SIZE_BELOW_DECLARATION, "fewer bytes than declared")
        writer = self._writer if self._writer is not None else self._open()
        if writer.sha256 != self._header.sha256:
            raise InvalidInput(ReasonCode.DIGEST_MISMATCH, "bytes do not match the declared sha256")
        return writer

    def __enter__(self) -> IncomingSource:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self._cleanup.close()
