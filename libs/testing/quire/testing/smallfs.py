"""Small file systems that a test fills up (issue 42): a tmpfs of a few
megabytes mounted where a service keeps its blobs or its temporary space,
and a filler that takes every free byte of it until ``ENOSPC``, holds it
full, and frees it.

Mounting needs root (the suite runs as root on its machines; elsewhere the
test that needs one fails saying so). Every mount is named after the
process that made it (``quire-test-<pid>``): ``unmount`` takes it away, and
``sweep_left_mounts`` (called before each new mount) unmounts those whose
process is gone, so a test killed mid-way leaves nothing mounted for long.

    with SmallFileSystem(data_dir / "blobs", 32 * MIB) as disk:
        ...start the stack...
        filler = Filler(disk.path)
        filler.fill(leave=4 * MIB)    # all but 4 MiB, before the moment
        held = filler.fill()          # the rest: the disk is full now
        await filler.hold(seconds)    # taking back whatever is freed meanwhile
        filler.free()
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import struct
import subprocess
import time
from pathlib import Path
from types import TracebackType

from quire.tempspace import pid_running

__all__ = ["MIB", "SOURCE_PREFIX", "Filler", "SmallFileSystem", "sweep_left_mounts", "unmount"]

MIB = 1024 * 1024
SOURCE_PREFIX = "quire-test-"
"""The source name of every mount made here, followed by the maker's pid."""
FILLER_NAME = ".filler"
_CHUNKS = (MIB, 64 * 1024, 4096, 512, 1)
UNMOUNT_TRIES = 50
_IN_CREATE = 0x00000100
_EVENT = struct.Struct("iIII")


def _mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every mount of this mount namespace."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2:
            found.append((fields[0], fields[1].replace("\\040", " ")))
    return found


def unmount(point: str) -> None:
    """Unmount ``point``; a mount still busy after a few tries (a process
    that has not let go of a file yet) is detached lazily."""
    for _ in range(UNMOUNT_TRIES):
        if subprocess.run(["umount", point], capture_output=True).returncode == 0:
            return
        if not any(p == point for _s, p in _mounts()):
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", point], check=True, capture_output=True)


class _Creations:
    """Names created in one directory, read as inotify reports them."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fd = -1

    def __enter__(self) -> _Creations:
        self._fd = self._libc.inotify_init1(os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        watch = self._libc.inotify_add_watch(self._fd, os.fsencode(self._directory), _IN_CREATE)
        if watch < 0:
            os.close(self._fd)
            raise OSError(ctypes.get_errno(), "inotify_add_watch")
        return self

    def next_names(self, timeout: float) -> list[str]:
        """The names created since the last call, waiting up to ``timeout``
        seconds for one (none: an empty list)."""
        readable, _, _ = select.select([self._fd], [], [], timeout)
        if not readable:
            return []
        data = os.read(self._fd, 64 * 1024)
        names, offset = [], 0
        while offset < len(data):
            _wd, _mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size
            names.append(os.fsdecode(data[offset : offset + length].rstrip(b"\0")))
            offset += length
        return names

    def __exit__(self, *_exc: object) -> None:
        os.close(self._fd)


def _free(fd: int) -> int:
    stats = os.fstatvfs(fd)
    return stats.f_bavail * stats.f_frsize


def sweep_left_mounts() -> int:
    """Unmount the test mounts whose maker is gone; how many."""
    swept = 0
    for source, point in _mounts():
        if not source.startswith(SOURCE_PREFIX):
            continue
        pid = source.removeprefix(SOURCE_PREFIX)
        if pid.isdigit() and not pid_running(int(pid)):
            with contextlib.suppress(subprocess.CalledProcessError):
                unmount(point)
                swept += 1
    return swept


class SmallFileSystem:
    """A tmpfs of ``size_bytes`` at ``path`` while the block runs (made if
    missing; what was in it is hidden meanwhile, and back afterwards)."""

    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = path.resolve()
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> None:
        if os.geteuid() != 0:
            raise PermissionError("mounting a small file system needs root")
        sweep_left_mounts()
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={self.size_bytes},mode=0755",
                f"{SOURCE_PREFIX}{os.getpid()}",
                str(self.path),
            ],
            check=True,
            capture_output=True,
        )
        self.mounted = True

    def unmount(self) -> None:
        if self.mounted:
            unmount(str(self.path))
            self.mounted = False

    def free_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def __enter__(self) -> SmallFileSystem:
        self.mount()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.unmount()


class Filler:
    """One file in ``directory`` that takes all its file system's free space."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILLER_NAME
        self._fd: int | None = None
        self.held = 0
        self.full_at: float | None = None
        """When ``fill`` first met ENOSPC (``time.monotonic()``)."""

    def fill(self, leave: int = 0) -> int:
        """Write until the file system answers ENOSPC to a single byte (or,
        with ``leave``, until no more than ``leave`` bytes are free); the
        bytes the filler holds. Call again to take what is left or freed:
        filling most of a disk beforehand and the rest at the moment to
        strike makes the strike take microseconds, not the time of writing
        the whole disk."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        fd = self._fd
        if not leave:
            # The free space in one call, the moment it is asked: a strike
            # lands before a service's next write, not a write loop later.
            with contextlib.suppress(OSError):
                os.posix_fallocate(fd, os.fstat(fd).st_size, max(_free(fd), 1))
        os.lseek(fd, 0, os.SEEK_END)
        for size in _CHUNKS:
            block = b"\0" * size
            while not leave or _free(fd) > leave + size:
                try:
                    os.write(fd, block)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    break
        self.held = os.fstat(fd).st_size
        if self.full_at is None and not leave:
            self.full_at = time.monotonic()
        return self.held

    def fill_when_made(
        self, directory: Path, prefix: str, timeout: float, *, containing: str = ""
    ) -> str:
        """Block until an entry whose name starts with ``prefix`` (and holds
        ``containing``) is made in ``directory`` (inotify: no entry is
        missed, however briefly it lives), then fill at once; the entry's
        name. TimeoutError if none is made within ``timeout`` seconds."""
        with _Creations(directory) as creations:
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no {prefix}* made in {timeout:g} s")
                for name in creations.next_names(remaining):
                    if name.startswith(prefix) and containing in name:
                        self.fill()
                        return name

    async def hold(self, seconds: float, interval: float = 0.05) -> None:
        """Keep the file system full for ``seconds``: whatever a service
        frees meanwhile (a failed write's temporary file) is taken again."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            await asyncio.to_thread(self.fill)
            await asyncio.sleep(interval)

    def free(self) -> None:
        """Give every byte back."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.unlink(missing_ok=True)
        self.held = 0
