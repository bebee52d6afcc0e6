"""Blob storage: content bound to digests, written to a temporary key and
promoted atomically.

The local backend keeps blobs under one root directory: ``<root>/<key>``.
Writers stream into ``<root>/.tmp/`` (files created exclusively), hash while
writing, fsync, and promote with a rename (or, for keys that must never be
overwritten, a hard link that fails if the key exists) followed by an fsync
of the directory. A crash leaves at worst a temporary file, never a partial
blob under a real key.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Protocol

from quire.errors import InvalidInput, PermanentError, TransientError
from quire.reasons import ReasonCode

__all__ = ["BlobStore", "BlobWriter", "LocalBlobStore", "sha256_file", "source_key"]

READ_CHUNK = 1024 * 1024


def source_key(tenant: str, sha256: str) -> str:
    return f"sources/{tenant}/{sha256}"


def sha256_file(path: str | Path) -> tuple[str, int]:
    """Digest and size of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class BlobWriter:
    """A temporary blob being written; promote it or it is removed on close."""

    def __init__(self, store: LocalBlobStore, max_bytes: int | None) -> None:
        self._store = store
        self._max_bytes = max_bytes
        fd, name = tempfile.mkstemp(dir=store.tmp_dir, prefix="w-")
        self.path = Path(name)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self.size = 0
        self._done = False

    def write(self, data: bytes) -> None:
        if self._max_bytes is not None and self.size + len(data) > self._max_bytes:
            raise InvalidInput(ReasonCode.SIZE_EXCEEDS_DECLARATION, "more bytes than declared")
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def finish(self) -> None:
        """Flush and fsync; after this the digest and size are final."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def promote(self, key: str, *, exclusive: bool = False) -> bool:
        """Move the blob under ``key``. Returns False when ``exclusive`` and the key exists."""
        if not self._file.closed:
            self.finish()
        created = self._store.promote_file(self.path, key, exclusive=exclusive)
        self._done = True
        return created

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.path.unlink(missing_ok=True)
        self._done = True

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if not self._done:
            self.discard()


class BlobStore(Protocol):
    """What the stages need from blob storage; the local backend is the default."""

    def writer(self, *, max_bytes: int | None = None) -> BlobWriter: ...
    def exists(self, key: str) -> bool: ...
    def local_path(self, key: str) -> Path: ...
    def read_verified(self, key: str, sha256: str, chunk: int = READ_CHUNK) -> Iterator[bytes]: ...


class LocalBlobStore:
    """Blobs in a directory on a local (or shared) filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp_dir = root / ".tmp"
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def writer(self, *, max_bytes: int | None = None) -> BlobWriter:
        return BlobWriter(self, max_bytes)

    def local_path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/") or key.startswith(".tmp"):
            raise PermanentError(ReasonCode.INTERNAL, "invalid blob key")
        return self.root / key

    def exists(self, key: str) -> bool:
        return self.local_path(key).is_file()

    def new_temp(self) -> Path:
        """An empty, exclusively created temporary file for a worker process to fill."""
        fd, name = tempfile.mkstemp(dir=self.tmp_dir, prefix="p-")
        os.close(fd)
        return Path(name)

    def promote_file(self, temp: Path, key: str, *, exclusive: bool = False) -> bool:
        """Promote a finished temporary file (see ``BlobWriter.promote``)."""
        with open(temp, "rb") as handle:
            os.fsync(handle.fileno())
        return self._promote(temp, key, exclusive=exclusive)

    def delete(self, key: str) -> None:
        self.local_path(key).unlink(missing_ok=True)

    def read_verified(self, key: str, sha256: str, chunk: int = READ_CHUNK) -> Iterator[bytes]:
        """Yield the blob's bytes; raise DIGEST_MISMATCH after the last chunk if they differ."""
        digest = hashlib.sha256()
        try:
            handle = open(self.local_path(key), "rb")
        except FileNotFoundError:
            raise PermanentError(ReasonCode.SOURCE_MISSING, "blob missing") from None
        except OSError:
            raise TransientError(ReasonCode.STORAGE_UNAVAILABLE, "blob unreadable") from None
        with handle:
            while data := handle.read(chunk):
                digest.update(data)
                yield data
        if digest.hexdigest() != sha256:
            raise PermanentError(ReasonCode.DIGEST_MISMATCH, "stored blob does not match digest")

    def _promote(self, temp: Path, key: str, *, exclusive: bool) -> bool:
        target = self.local_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            if exclusive:
                try:
                    os.link(temp, target)
                except FileExistsError:
                    return False
                finally:
                    temp.unlink(missing_ok=True)
            else:
                os.replace(temp, target)
            _fsync_dir(target.parent)
        except OSError as error:
            temp.unlink(missing_ok=True)
            raise TransientError(ReasonCode.STORAGE_UNAVAILABLE, "blob promote failed") from error
        return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
