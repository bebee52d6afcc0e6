"""The local blob backend, the embedded default: blobs under one root
directory, ``<root>/<key>``, promoted with a rename (or, for keys that must
never be overwritten, a hard link that fails if the key exists) followed by
an fsync of the directory. See ``quire.blobstore`` for what every backend
promises."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from quire.blobstore import (
    DEFAULT_OWNER,
    SealedBlobStore,
    StorageWrite,
    check_key,
)
from quire.datakeys import DataKeys
from quire.errors import PermanentError, TransientError
from quire.privatefiles import fsync_dir
from quire.reasons import ReasonCode

__all__ = ["LocalBlobStore"]


class LocalBlobStore(SealedBlobStore):
    """Blobs in a directory on a local (or shared) filesystem, sealed under
    the data keys of ``keys``; the temporary space is ``<root>/.tmp``.

    ``owner`` is the service whose temporary entries this store makes; they are
    named ``quire.tempspace.temp_prefix(owner, kind)``.
    """

    def __init__(self, root: Path, keys: DataKeys, *, owner: str = DEFAULT_OWNER) -> None:
        super().__init__(keys, root / ".tmp", owner=owner)
        self.root = root

    def owned_by(self, owner: str) -> LocalBlobStore:
        """The same store, its temporary entries named after ``owner``."""
        return LocalBlobStore(self.root, self.keys, owner=owner)

    def local_path(self, key: str) -> Path:
        """Where the sealed bytes of ``key`` are (never plaintext); for tests
        and this backend only: callers use the ``BlobStore`` methods."""
        return self.root / check_key(key)

    def exists(self, key: str) -> bool:
        return self.local_path(key).is_file()

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (a ``<kind>/`` folder), sorted."""
        folder = self.root / check_key(prefix.rstrip("/"))
        if not folder.is_dir():
            return []
        entries = (p for p in folder.rglob("*") if not p.is_dir())
        return sorted(p.relative_to(self.root).as_posix() for p in entries)

    @contextlib.contextmanager
    def open_sealed(self, key: str) -> Iterator[BinaryIO]:
        try:
            handle = open(self.local_path(key), "rb")
        except FileNotFoundError:
            raise PermanentError(ReasonCode.SOURCE_MISSING, "blob missing") from None
        except OSError:
            raise TransientError(ReasonCode.STORAGE_UNAVAILABLE, "blob unreadable") from None
        with handle:
            yield handle

    def promote_sealed(
        self, temp: Path, key: str, *, exclusive: bool = False, sync_directory: bool = True
    ) -> bool:
        # Its bytes are on disk already: the writer's ``finish`` fsynced the
        # file before this is called; the rename is made durable below.
        try:
            with StorageWrite("blob not promoted"):
                return self._promote(temp, key, exclusive=exclusive, sync=sync_directory)
        finally:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        self.local_path(key).unlink(missing_ok=True)

    def sync_directories(self, keys: list[str]) -> None:
        with StorageWrite("blob not promoted"):
            for directory in sorted({self.local_path(key).parent for key in keys}):
                fsync_dir(directory)

    def _promote(self, temp: Path, key: str, *, exclusive: bool, sync: bool) -> bool:
        target = self.local_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        if exclusive:
            try:
                os.link(temp, target)
            except FileExistsError:
                return False
        else:
            os.replace(temp, target)
        if sync:
            fsync_dir(target.parent)
        return True
