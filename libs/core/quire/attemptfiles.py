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
import itertools
import shutil
from pathlib import Path
from types import TracebackType

from quire.blobstore import BlobStore
from quire.metrics import count_source_read, phase

__all__ = ["AttemptFiles"]


class AttemptFiles:
    def __init__(self, blobs: BlobStore) -> None:
        self._blobs = blobs
        self._directory: Path | None = None
        self._names = itertools.count(1)

    @property
    def directory(self) -> Path:
        assert self._directory is not None, "use AttemptFiles as an async context manager"
        return self._directory

    async def plain(self, key: str, sha256: str) -> str:
        """The path of a decrypted, digest-checked copy of blob ``key``."""
        with phase("fetch"):
            path = await asyncio.to_thread(self._blobs.materialize, key, sha256, self.directory)
        count_source_read(path.stat().st_size)
        return str(path)

    def name_for(self, kind: str) -> Path:
        """A fresh name in the private directory for a file a worker may write.

        Nothing is created: the directory is this attempt's alone (0700, made
        for it), so no one else can take the name first, and a file that is
        never written (a repair that was not needed) costs nothing.
        """
        return self.directory / f"{kind}-{next(self._names)}"

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
