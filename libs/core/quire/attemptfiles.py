"""An attempt's plaintext documents: in memory when small, else only in its
private directory.

Blobs are sealed at rest (``quire.blobstore``), but pikepdf and pyHanko open
files by path. A document of at most ``in_memory_bytes`` is decrypted
(checked against its digest) into memory and goes to the sandbox worker as
bytes over its pipe, where it is an in-memory file for the task's length
(``quire.memoryfiles``); what the worker writes for it comes back the same
way. Nothing of it touches a disk.

A larger document is decrypted into the attempt's private (0700) directory
under the blob store's temporary space, named after its service, made
exclusively the first time the attempt needs it; the worker writes its
output there before it is sealed. The directory goes when the attempt ends,
and a dead process's directory is swept with its other leftovers.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from quire.blobstore import BlobStore
from quire.memoryfiles import InMemory, MemoryOutput
from quire.metrics import count_source_read, phase

__all__ = ["AttemptFiles", "Document", "Output", "in_memory", "keep", "size_of", "written"]

Document = str | InMemory
"""What a sandbox task reads: a path in the private directory, or the bytes."""
Output = Path | MemoryOutput
"""Where a sandbox task writes: a path in the private directory, or memory."""


class AttemptFiles:
    def __init__(self, blobs: BlobStore, *, in_memory_bytes: int = 0) -> None:
        """``in_memory_bytes``: documents up to this size stay in memory (0:
        every document is a file)."""
        self._blobs = blobs
        self._in_memory_bytes = in_memory_bytes
        self._directory: Path | None = None
        self._making: asyncio.Lock | None = None
        self._names = itertools.count(1)

    async def private_directory(self) -> Path:
        """The attempt's private directory, made (exclusively, 0700) on first need."""
        if self._making is None:
            self._making = asyncio.Lock()
        async with self._making:
            if self._directory is None:
                self._directory = await asyncio.to_thread(self._blobs.new_temp_dir, "attempt")
        return self._directory

    async def plain(self, key: str, sha256: str) -> str:
        """The path of a decrypted, digest-checked copy of blob ``key``."""
        directory = await self.private_directory()
        with phase("fetch"):
            path = await asyncio.to_thread(self._blobs.materialize, key, sha256, directory)
        count_source_read(path.stat().st_size)
        return str(path)

    async def document(self, key: str, sha256: str) -> Document:
        """Blob ``key``, decrypted and digest-checked: its bytes when it is
        small enough to stay in memory, else a copy's path."""
        if self._in_memory_bytes > 0:
            with phase("fetch"):
                data = await asyncio.to_thread(
                    self._blobs.plain_bytes, key, sha256, self._in_memory_bytes
                )
            if data is not None:
                count_source_read(len(data))
                return InMemory(data)
        return await self.plain(key, sha256)

    async def documents(self, blobs: Sequence[tuple[str, str]]) -> list[Document]:
        """Each of ``blobs`` (key, sha256) as ``document`` gives it. The small
        ones are read together, in one trip to a thread: reading a small
        document costs less than a trip. Those too large to stay in memory
        are then copied side by side, each on its own thread."""
        if self._in_memory_bytes <= 0 or len(blobs) < 2:
            return list(await asyncio.gather(*(self.document(k, s) for k, s in blobs)))
        with phase("fetch"):
            held = await asyncio.to_thread(self._read_small, blobs)
        for data in held:
            if data is not None:
                count_source_read(len(data))
        copies = iter(
            await asyncio.gather(
                *(
                    self.plain(k, s)
                    for (k, s), data in zip(blobs, held, strict=True)
                    if data is None
                )
            )
        )
        return [InMemory(data) if data is not None else next(copies) for data in held]

    def _read_small(self, blobs: Sequence[tuple[str, str]]) -> list[bytes | None]:
        """Each blob's checked bytes, or None for one too large to hold."""
        return [self._blobs.plain_bytes(k, s, self._in_memory_bytes) for k, s in blobs]

    async def output(self, kind: str, *, in_memory: bool) -> Output:
        """Where a worker writes a ``kind`` of output: memory (its inputs were
        small), or a fresh name in the private directory."""
        if in_memory and self._in_memory_bytes > 0:
            return MemoryOutput()
        return await self.name_for(kind)

    async def name_for(self, kind: str) -> Path:
        """A fresh name in the private directory for a file a worker may write.

        Nothing is created: the directory is this attempt's alone (0700, made
        for it), so no one else can take the name first, and a file that is
        never written (a repair that was not needed) costs nothing.
        """
        return (await self.private_directory()) / f"{kind}-{next(self._names)}"

    async def __aenter__(self) -> AttemptFiles:
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


def in_memory(documents: list[Document]) -> bool:
    """Whether every one of ``documents`` is held in memory."""
    return all(isinstance(document, InMemory) for document in documents)


def size_of(document: Document) -> int:
    return len(document) if isinstance(document, InMemory) else os.path.getsize(document)


def written(output: Output) -> Document:
    """What a worker wrote to ``output``, to read again or keep."""
    if isinstance(output, MemoryOutput):
        if output.data is None:
            raise RuntimeError("the worker's output did not come back")
        return InMemory(output.data)
    return str(output)


def keep(blobs: BlobStore, document: Document, key: str, *, exclusive: bool = False) -> bool:
    """Seal a worker's output into the store under ``key`` (blocking: run it
    on a thread); a file's plaintext copy is gone afterwards."""
    if isinstance(document, InMemory):
        return blobs.promote_bytes(document.data, key, exclusive=exclusive)
    return blobs.promote_file(Path(document), key, exclusive=exclusive)
