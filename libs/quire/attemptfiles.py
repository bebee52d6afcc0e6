"""Plaintext files for one attempt, only in its private directory.

Blobs are sealed at rest (``quire.blobstore``), but pikepdf and pyHanko open
files by path. An attempt gets a private (0700) directory under the blob
store's temporary space, named after its service; blobs it reads are
decrypted there (each checked against its digest) and its output is written
there before it is sealed. The directory goes when the attempt ends, and a
dead process's directory is swept with its other leftovers.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from quire.blobstore import LocalBlobStore

__all__ = ["AttemptFiles"]


class AttemptFiles:
    def __init__(self, blobs: LocalBlobStore) -> None:
        self._blobs = blobs
        self._directory: Path | None = None

    @property
    def directory(self) -> Path:
        assert self._directory is not None, "use AttemptFiles as an async context manager"
        return self._directory

    async def plain(self, key: str, sha256: str) -> str:
        """The path of a decrypted, digest-checked copy of blob ``key``."""
        path = await asyncio.to_thread(self._blobs.materialize, key, sha256, self.directory)
        return str(path)

    def new_file(self, kind: str) -> Path:
        """An empty file in the private directory, for a worker's output."""
        handle = tempfile.NamedTemporaryFile(dir=self.directory, prefix=f"{kind}-", delete=False)
        handle.close()
        return Path(handle.name)

    async def __aenter__(self) -> AttemptFiles:
        self._directory = await asyncio.to_thread(self._blobs.new_temp_dir, "attempt")
        return self

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if self._directory is not None:
            await asyncio.to_thread(shutil.rmtree, self._directory, ignore_errors=True)
            self._directory = None
