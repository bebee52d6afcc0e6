"""Small private files written whole: mode 0600, atomically, durably.

``write_private`` writes the bytes to a fresh temporary file beside the
target (created exclusively, mode 0600, fsynced), then moves it into place:
``os.replace`` by default, or ``os.link`` with ``exclusive=True``, so that of
several writers racing to create the same file exactly one wins and the
others leave it untouched. The directory is then fsynced (best effort).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["fsync_dir", "write_private"]

PRIVATE_MODE = 0o600


def fsync_dir(path: Path, *, best_effort: bool = False) -> None:
    """Make the entries of directory ``path`` durable; with ``best_effort``
    an ``OSError`` (a file system that cannot fsync a directory) is ignored."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if not best_effort:
            raise


def write_private(path: Path, data: bytes, *, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` (mode 0600) atomically.

    With ``exclusive``, ``path`` is only created: if it already exists it is
    left as it is and the result is False. Otherwise ``path`` is replaced.
    True when ``data`` is now the file's content."""
    temp = _write_temp(path.parent, data)
    try:
        if exclusive:
            try:
                os.link(temp, path)  # the first creator wins
            except FileExistsError:
                return False
        else:
            os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
        fsync_dir(path.parent, best_effort=True)
    return True


def _write_temp(directory: Path, data: bytes) -> Path:
    temp = directory / f".new-{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp
