"""Which files a process makes, seen from outside it: Linux inotify over
directory trees, and a scan of a tree for bytes that must not be there.

For promises of the kind "no plaintext touches a disk": a file created and
removed again between two listings would escape a comparison of listings,
but not inotify, which reports each creation as it happens. A file made
with ``memfd_create`` (``quire.memoryfiles``) is in no directory and is
not reported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from pathlib import Path
from types import TracebackType

__all__ = ["CreatedFiles", "files_holding"]

IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
_EVENT = struct.Struct("iIII")
_READ = 64 * 1024


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


class CreatedFiles:
    """Every entry created in (or moved into) the directories under ``roots``
    while the watch is open. Directories made meanwhile are reported, not
    watched in turn."""

    def __init__(self, *roots: Path) -> None:
        self._roots = roots
        self._libc = _libc()
        self._fd = -1
        self._watched: dict[int, Path] = {}
        self.created: list[Path] = []
        """Filled when the watch closes."""

    def __enter__(self) -> CreatedFiles:
        self._fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        for root in self._roots:
            if not root.is_dir():
                raise FileNotFoundError(f"nothing to watch at {root}")
            for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
                self._watch(directory)
        return self

    def _watch(self, directory: Path) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), IN_CREATE | IN_MOVED_TO)
        if wd < 0:
            error = ctypes.get_errno()
            if error == errno.ENOENT:  # removed since it was listed
                return
            raise OSError(error, f"inotify_add_watch {directory}")
        self._watched[wd] = directory

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._fd, _READ)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                wd, _mask, _cookie, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + length].rstrip(b"\0")
                offset += length
                self.created.append(self._watched.get(wd, Path("?")) / os.fsdecode(name))

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        try:
            self._drain()
        finally:
            os.close(self._fd)


def files_holding(root: Path, needle: bytes) -> list[Path]:
    """The files under ``root`` whose bytes contain ``needle``."""
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
        except OSError:  # gone meanwhile, or a socket
            continue
    return found
