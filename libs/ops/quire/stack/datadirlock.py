"""One stack per data directory: an OS lock held for the life of the stack.

A second ``quire up`` on a directory already in use would start a second
nats-server on the same JetStream store and five more services on the same
databases. The stack therefore takes an exclusive ``flock`` on
``stack.lock`` in the data directory before it starts anything and keeps
the file open until it stops. The kernel drops the lock when the process
ends, however it ends, so a crashed stack never leaves a stale lock behind
(a pid file alone would). The holder's pid is written into the file only to
name it in the refusal; the lock, not the pid, decides.

Children are started with ``close_fds`` (subprocess's default), so they do
not inherit the lock: it lives and dies with the supervising process.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["LOCK_FILE", "DataDirInUse", "DataDirLock"]

LOCK_FILE = "stack.lock"


class DataDirInUse(RuntimeError):
    """Another live process holds the data directory's stack lock."""

    def __init__(self, data_dir: Path, holder: str) -> None:
        self.data_dir = data_dir
        self.holder = holder
        who = f" (pid {holder})" if holder else ""
        super().__init__(f"data directory {data_dir} is in use by a running stack{who}")


class DataDirLock:
    """An exclusive, non-blocking ``flock`` on ``<data_dir>/stack.lock``."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the lock or raise ``DataDirInUse`` at once (never waits)."""
        path = data_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise DataDirInUse(data_dir, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(data_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays: removing it would let a
        second process lock a new inode while a third still holds the old one."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
