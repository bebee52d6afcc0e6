"""Storage faults for the fault tests, as a wrapper around a real blob store.

A test puts ``storage.transient`` (EIO) or ``storage.permanent`` (EROFS) in
``QUIRE_FAULTS_DIR``; while it is there, every write through the wrapper
fails as the operating system would make it fail, classified like any real
storage error (``quire.blobstore.storage_error``), and nothing half-written
is left. ``open_blob_store`` puts the wrapper in place only when
``QUIRE_FAULTS_DIR`` is set: in production the stores have no fault check
at all in their write path.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from quire.blobstore import READ_CHUNK, BlobStore, BlobWriter, storage_error
from quire.datakeys import DataKeys

__all__ = ["FaultInjectingBlobStore"]


class _Faults:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def check(self, message: str) -> None:
        """Raise the classified error of the fault in place, if any."""
        if (self.folder / "storage.permanent").exists():
            raise storage_error(OSError(errno.EROFS, os.strerror(errno.EROFS)), message)
        if (self.folder / "storage.transient").exists():
            raise storage_error(OSError(errno.EIO, os.strerror(errno.EIO)), message)


class _FaultyWriter(BlobWriter):
    """A real writer, its writes and promotion refused while a fault is in place."""

    def __init__(self, inner: BlobWriter, faults: _Faults) -> None:  # noqa: D107 - no super().__init__: it delegates
        self._inner = inner
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def sha256(self) -> str:
        return self._inner.sha256

    def write(self, data: bytes) -> None:
        self._faults.check("blob write failed")
        self._inner.write(data)

    def finish(self) -> None:
        self._faults.check("blob write failed")
        self._inner.finish()

    def promote(self, key: str, *, exclusive: bool = False, sync_directory: bool = True) -> bool:
        try:
            self._faults.check("blob not promoted")
        except BaseException:
            self._inner.discard()
            raise
        return self._inner.promote(key, exclusive=exclusive, sync_directory=sync_directory)

    def discard(self) -> None:
        self._inner.discard()

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._inner.__exit__(kind, value, tb)


class FaultInjectingBlobStore:
    """``inner``, with the storage faults in ``folder`` raised on every write."""

    def __init__(self, inner: BlobStore, folder: Path) -> None:
        self._inner = inner
        self._faults = _Faults(folder)

    @property
    def keys(self) -> DataKeys:
        return self._inner.keys

    @property
    def owner(self) -> str:
        return self._inner.owner

    @property
    def tmp_dir(self) -> Path:
        return self._inner.tmp_dir

    def owned_by(self, owner: str) -> BlobStore:
        return FaultInjectingBlobStore(self._inner.owned_by(owner), self._faults.folder)

    def writer(self, tenant: str, *, max_bytes: int | None = None) -> BlobWriter:
        self._faults.check("temporary file not created")
        return _FaultyWriter(self._inner.writer(tenant, max_bytes=max_bytes), self._faults)

    def promote_file(self, temp: Path, key: str, *, exclusive: bool = False) -> bool:
        try:
            self._faults.check("blob write failed")
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)  # gone whatever the outcome, as promised
            raise
        return self._inner.promote_file(temp, key, exclusive=exclusive)

    def promote_bytes(self, data: bytes, key: str, *, exclusive: bool = False) -> bool:
        self._faults.check("blob write failed")
        return self._inner.promote_bytes(data, key, exclusive=exclusive)

    def sync_directories(self, keys: list[str]) -> None:
        self._faults.check("blob not promoted")
        self._inner.sync_directories(keys)

    def new_temp(self, kind: str = "part") -> Path:
        self._faults.check("temporary file not created")
        return self._inner.new_temp(kind)

    def new_temp_dir(self, kind: str = "attempt") -> Path:
        self._faults.check("temporary directory not created")
        return self._inner.new_temp_dir(kind)

    def exists(self, key: str) -> bool:
        return self._inner.exists(key)

    def delete(self, key: str) -> None:
        self._inner.delete(key)

    def list_keys(self, prefix: str) -> list[str]:
        return self._inner.list_keys(prefix)

    def read_plain(self, key: str) -> Iterator[bytes]:
        return self._inner.read_plain(key)

    def read_verified(self, key: str, sha256: str, chunk: int = READ_CHUNK) -> Iterator[bytes]:
        return self._inner.read_verified(key, sha256, chunk)

    def digest(self, key: str) -> tuple[str, int]:
        return self._inner.digest(key)

    def materialize(self, key: str, sha256: str, directory: Path) -> Path:
        return self._inner.materialize(key, sha256, directory)

    def plain_bytes(self, key: str, sha256: str, limit: int) -> bytes | None:
        return self._inner.plain_bytes(key, sha256, limit)

    def close(self) -> None:
        self._inner.close()
