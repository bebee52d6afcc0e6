"""A delivery's small documents, read while its lease is taken.

Before any work the stage runner takes the delivery's lease, reads the job
gate and asks audit; none of that needs the job's documents, and the work
needs them first. So a stage whose work names its inputs (``ReadsAhead``)
has them read at once, beside those steps: decrypted and checked against
their digests, into memory, and only documents small enough to stay there
(``quire.attemptfiles``). ``AttemptFiles.document`` takes a document read
ahead instead of reading it again. One the read found missing, altered,
unreadable or too large is read as ever, raising what that raises, so the
outcome of a delivery is the same with or without reading ahead. What a
delivery read ahead and did not take is dropped when it ends.

Nothing read ahead is written anywhere: a delivery refused before its work
(a job that ended, a forged task) costs only the reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Protocol, runtime_checkable

from quire.blobstore import BlobStore
from quire.type import queue_pb2

__all__ = ["ReadingAhead", "ReadsAhead", "reading_ahead", "taken_ahead"]


class ReadingAhead:
    """The reads one delivery started, by (blob key, sha256)."""

    def __init__(self, blobs: BlobStore, limit: int, inputs: Iterable[tuple[str, str]]) -> None:
        self._reads: dict[tuple[str, str], asyncio.Future[bytes | None]] = {}
        if limit <= 0:
            return
        for key, sha256 in inputs:
            if key and (key, sha256) not in self._reads:
                self._reads[key, sha256] = asyncio.ensure_future(
                    asyncio.to_thread(blobs.plain_bytes, key, sha256, limit)
                )

    async def take(self, key: str, sha256: str) -> bytes | None:
        """The document's bytes if they were read ahead and came out whole;
        None otherwise (the caller reads it itself)."""
        read = self._reads.pop((key, sha256), None)
        if read is None:
            return None
        try:
            return await read
        except Exception:  # noqa: BLE001 - read again by the caller, which sees the error
            return None

    def close(self) -> None:
        """Drop what was not taken (a read already running ends on its thread)."""
        for read in self._reads.values():
            if read.done():
                if not read.cancelled():
                    read.exception()  # seen: nobody will take it
            else:
                read.cancel()
        self._reads.clear()


@runtime_checkable
class ReadsAhead(Protocol):
    """Stage work that names what it will read first."""

    def read_ahead(self, task: queue_pb2.JobTask) -> ReadingAhead:
        """Start reading ``task``'s inputs."""
        ...


_current: ContextVar[ReadingAhead | None] = ContextVar("quire_reading_ahead", default=None)


@contextlib.contextmanager
def reading_ahead(reading: ReadingAhead | None) -> Iterator[None]:
    """Let ``AttemptFiles`` of this delivery (its task and those it starts)
    take from ``reading``; what is left is dropped on the way out."""
    if reading is None:
        yield
        return
    token = _current.set(reading)
    try:
        yield
    finally:
        _current.reset(token)
        reading.close()


async def taken_ahead(key: str, sha256: str) -> bytes | None:
    """Blob ``key``'s bytes if this delivery read them ahead, else None."""
    reading = _current.get()
    return None if reading is None else await reading.take(key, sha256)
