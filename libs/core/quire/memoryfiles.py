"""Small documents go to a sandbox worker as bytes over its pipe, not as files.

A task's arguments may hold :class:`InMemory` where a path would be, and
:class:`MemoryOutput` where the worker writes a file. In the worker, just
before the task runs, each becomes the path of an anonymous in-memory file
(``memfd_create``, opened again through ``/proc/self/fd``), so libraries that
open documents by path (pikepdf, pypdf, pyHanko, libmagic) read and write
them unchanged. Nothing touches a disk or a directory, and the files vanish
with their descriptors when the task ends, whatever its outcome. The
outputs' bytes go back with the result, and the caller's
:class:`MemoryOutput` holds them once the call returns.

Placeholders are found in the arguments themselves, in lists and tuples, and
in dataclass fields, in the same order in both processes.
"""

from __future__ import annotations

import dataclasses
import io
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "InMemory",
    "MemoryOutput",
    "WithOutputs",
    "collect",
    "delivered",
    "opened",
    "returned",
    "save_pdf",
    "scratch_beside",
]

_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class InMemory:
    """A document's bytes, where a task expects the path of a file to read."""

    data: bytes

    def __len__(self) -> int:
        return len(self.data)


class MemoryOutput:
    """Where a task expects the path of a file to write: the bytes it wrote
    are ``data`` once the call returns (None until then, or if it failed)."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: bytes | None = None


@dataclass(frozen=True)
class WithOutputs:
    """A worker's result, with the bytes of each ``MemoryOutput`` in order."""

    value: Any
    outputs: list[bytes]


_PLAIN = frozenset({str, bytes, int, float, bool, type(None)})
"""Types that hold no placeholder: most of a call's arguments, passed at once."""


def _mapped(value: Any, swap: Callable[[Any], Any]) -> Any:
    """``value`` with each placeholder in it replaced by ``swap(placeholder)``
    (depth first, in order); the value itself when it holds none."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, InMemory | MemoryOutput):
        return swap(value)
    if isinstance(value, list | tuple):
        items = [_mapped(item, swap) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for field in dataclasses.fields(value):
            old = getattr(value, field.name)
            new = _mapped(old, swap)
            if new is not old:
                changes[field.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value


def collect(args: tuple[Any, ...]) -> list[MemoryOutput]:
    """The caller's outputs among ``args``, in the order the worker fills them."""
    found: list[MemoryOutput] = []

    def note(placeholder: Any) -> Any:
        if isinstance(placeholder, MemoryOutput):
            found.append(placeholder)
        return placeholder

    _mapped(args, note)
    return found


def _memory_file(data: bytes) -> int:
    fd = os.memfd_create("quire-document", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    pieces = []
    while piece := os.read(fd, _READ_CHUNK):
        pieces.append(piece)
    return b"".join(pieces)


@contextmanager
def opened(args: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], list[int]]]:
    """In the worker: ``args`` with every placeholder a path to its in-memory
    file, and the descriptors of the outputs; every file is closed after."""
    descriptors: list[int] = []
    outputs: list[int] = []

    def swap(placeholder: Any) -> str:
        fd = _memory_file(placeholder.data if isinstance(placeholder, InMemory) else b"")
        descriptors.append(fd)
        if isinstance(placeholder, MemoryOutput):
            outputs.append(fd)
        return f"/proc/self/fd/{fd}"

    try:
        yield _mapped(args, swap), outputs
    finally:
        for fd in descriptors:
            os.close(fd)


def returned(value: Any, outputs: list[int]) -> Any:
    """In the worker: the task's result, with its outputs' bytes if it had any."""
    if not outputs:
        return value
    return WithOutputs(value, [_read_all(fd) for fd in outputs])


def delivered(result: Any, outputs: list[MemoryOutput]) -> Any:
    """In the caller: the task's own result, its outputs' bytes handed to
    their ``MemoryOutput``."""
    if not outputs:
        return result
    if not isinstance(result, WithOutputs) or len(result.outputs) != len(outputs):
        raise RuntimeError("a sandbox task's outputs did not come back")
    for output, data in zip(outputs, result.outputs, strict=True):
        output.data = data
    return result.value


_IN_MEMORY_PREFIX = "/proc/self/fd/"


def save_pdf(pdf: Any, path: str, **options: Any) -> None:
    """pikepdf's ``pdf.save`` into ``path``, written in place. pikepdf
    replaces a path atomically through a temporary file beside it, which an
    in-memory file has no directory for; a task's output is read only after
    the task returns, so nothing sees it half-written either way.

    qpdf writes into memory first, then the bytes go to ``path`` in one
    write. qpdf aborts the whole process (``std::terminate``) when a write
    fails while it computes a deterministic ``/ID``: written straight to a
    full disk, the sandbox worker would die as it does on a hostile file.
    A write into memory cannot meet a full disk, and the one write after
    ``save`` raises its ``OSError`` (``ENOSPC``) here. It is also the cheap
    way: ``io.BytesIO``'s ``write`` is C, where a Python ``write`` would be
    called for every few bytes qpdf emits (thousands of times a packet)."""
    written = io.BytesIO()
    pdf.save(written, **options)
    with open(path, "wb") as out, written.getbuffer() as data:
        out.write(data)


@contextmanager
def scratch_beside(path: str, suffix: str) -> Iterator[str]:
    """A scratch file for a task reading ``path``: in memory beside an
    in-memory document, else a new file in the document's directory (the
    attempt's private one); gone afterwards."""
    if path.startswith(_IN_MEMORY_PREFIX):
        fd = _memory_file(b"")
        try:
            yield f"{_IN_MEMORY_PREFIX}{fd}"
        finally:
            os.close(fd)
        return
    handle, scratch = tempfile.mkstemp(suffix=suffix, dir=os.path.dirname(path) or None)
    os.close(handle)
    try:
        yield scratch
    finally:
        os.unlink(scratch)
