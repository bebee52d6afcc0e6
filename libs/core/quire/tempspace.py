"""Temporary space: who owns each entry under the blob store's ``.tmp``, how
much each service holds, and sweeping what dead processes left behind.

Every temporary file or attempt directory is named
``<service>.<host>.<pid>.<kind>-<random>`` so that its owner can be told
from its name: usage is counted per stage, and an entry whose process is gone
(same host, pid no longer running) is left over and may be swept.

Usage is measured in the background at an interval (``TempSpaceMonitor``);
readers take the last reading, so no request and no queue message ever scans
the directory. A stage's ``TempBudget`` is a pull gate for its queue worker;
admission sheds new work from the same readings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from quire.settings import TempSpaceSettings

__all__ = [
    "TempOwner",
    "TempUsage",
    "TempSpaceMonitor",
    "TempBudget",
    "TempKeeper",
    "UNKNOWN_OWNER",
    "temp_prefix",
    "owner_prefix",
    "local_owner",
    "owner_of",
    "owner_alive",
    "pid_running",
    "leftover_entries",
    "entry_bytes",
    "free_bytes",
    "measure_usage",
    "sweep_leftovers",
]

log = logging.getLogger(__name__)

UNKNOWN_OWNER = "unknown"
"""The usage bucket of entries whose names Quire did not make."""
_HOST = socket.gethostname().replace(".", "_")[:63] or "host"


@dataclass(frozen=True)
class TempOwner:
    service: str
    host: str
    pid: int


def local_owner(service: str, pid: int | None = None) -> TempOwner:
    """``service`` on this host, as process ``pid`` (this process by default)."""
    return TempOwner(service=service, host=_HOST, pid=os.getpid() if pid is None else pid)


def owner_prefix(owner: TempOwner, kind: str) -> str:
    """The name prefix for a temporary entry of ``owner``."""
    return f"{owner.service}.{owner.host}.{owner.pid}.{kind}-"


def temp_prefix(service: str, kind: str) -> str:
    """The name prefix for a temporary entry made by this process."""
    return owner_prefix(local_owner(service), kind)


def owner_of(path: Path) -> TempOwner | None:
    """The owner encoded in an entry's name, or None for a name Quire did not make."""
    parts = path.name.split(".", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return TempOwner(service=parts[0], host=parts[1], pid=int(parts[2]))


def pid_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(path: Path, *, stale_seconds: float = 3600.0) -> bool:
    """Whether the entry's owner may still be using it.

    On this host the pid tells; for another host's entry (shared storage) or an
    unknown name only age does: older than ``stale_seconds`` counts as dead.
    """
    owner = owner_of(path)
    if owner is not None and owner.host == _HOST:
        return pid_running(owner.pid)
    try:
        age = time.time() - path.lstat().st_mtime
    except FileNotFoundError:
        return False
    return age < stale_seconds


def leftover_entries(tmp_dir: Path, *, stale_seconds: float = 3600.0) -> list[Path]:
    """Entries of ``tmp_dir`` whose owner is gone."""
    try:
        entries = list(tmp_dir.iterdir())
    except FileNotFoundError:
        return []
    return sorted(e for e in entries if not owner_alive(e, stale_seconds=stale_seconds))


def entry_bytes(path: Path) -> int:
    """Bytes held by one entry: a file's size, or a directory's files, recursively.

    Entries come and go while they are measured; whatever vanished counts 0.
    Symbolic links are counted as links, never followed.
    """
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
    except FileNotFoundError:
        return 0
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


@dataclass(frozen=True)
class TempUsage:
    """One measurement of the temporary space."""

    total_bytes: int
    by_service: Mapping[str, int]
    """Bytes per owning service (``UNKNOWN_OWNER`` for names Quire did not make)."""
    free_bytes: int
    """Free bytes on the filesystem that holds the temporary space."""

    def of(self, service: str) -> int:
        return self.by_service.get(service, 0)


def measure_usage(tmp_dir: Path) -> TempUsage:
    """Bytes under ``tmp_dir`` per owning service, and the disk's free bytes."""
    by_service: dict[str, int] = {}
    try:
        entries = list(tmp_dir.iterdir())
    except FileNotFoundError:
        entries = []
    for entry in entries:
        owner = owner_of(entry)
        service = owner.service if owner is not None else UNKNOWN_OWNER
        by_service[service] = by_service.get(service, 0) + entry_bytes(entry)
    return TempUsage(
        total_bytes=sum(by_service.values()),
        by_service=by_service,
        free_bytes=free_bytes(tmp_dir),
    )


def free_bytes(tmp_dir: Path) -> int:
    """Free bytes on the file system that holds ``tmp_dir``: one ``statvfs``,
    no scan (the file system's own counters)."""
    return shutil.disk_usage(tmp_dir if tmp_dir.exists() else tmp_dir.parent).free


def _remove(path: Path) -> bool:
    """Remove one entry; False if it was already gone (another sweeper was first)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return False
    return True


def sweep_leftovers(tmp_dir: Path, *, stale_seconds: float = 3600.0) -> int:
    """Remove the entries whose owner is gone, whoever made them; the count removed.

    Several services sweep the same directory; losing a race is not an error.
    """
    removed = 0
    failed = 0
    for entry in leftover_entries(tmp_dir, stale_seconds=stale_seconds):
        try:
            removed += _remove(entry)
        except OSError:
            failed += 1
    if failed:
        log.warning("%d left-over temporary entries could not be removed", failed)
    return removed


class TempSpaceMonitor:
    """Measures the temporary space at an interval, off the event loop.

    Readers take ``reading`` (the last measurement), never a fresh scan.
    """

    def __init__(self, tmp_dir: Path, *, interval_seconds: float) -> None:
        self.tmp_dir = tmp_dir
        self._interval = interval_seconds
        self._reading: TempUsage | None = None

    @property
    def reading(self) -> TempUsage | None:
        """The last measurement, or None before the first."""
        return self._reading

    async def refresh(self) -> TempUsage:
        reading = await asyncio.to_thread(measure_usage, self.tmp_dir)
        self._reading = reading
        return reading

    async def run(self) -> None:
        """Measure every interval until cancelled; a failed measurement keeps the last."""
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.refresh()
            except OSError as error:
                log.warning("temporary space not measured (%s)", type(error).__name__)


class TempBudget:
    """A stage's pull gate: closed while its own temporary bytes are over
    budget, or while the disk holding the temporary space has less than
    ``pause_free_bytes`` free (a full disk: every attempt would fail on it).

    Work already taken is not touched: it finishes and frees its space (or
    fails its delivery with STORAGE_UNAVAILABLE and is retried later), and a
    later reading opens the gate again. While the gate is closed the stage
    pulls nothing, so a retried message is not delivered again, and a full
    disk does not use up the job's deliveries (``QUIRE_MAX_DELIVER``) however
    long it stays full. The budget is checked against the monitor's cached
    reading, so waiting costs no directory scan; the free space is asked of
    the file system at each check (one ``statvfs``), so a disk filled since
    the last reading closes the gate before the next pull, not up to a
    reading later (jobs retried a few tenths of a second apart used up
    three deliveries in that second).
    """

    def __init__(
        self,
        monitor: TempSpaceMonitor,
        *,
        service: str,
        budget_bytes: int,
        poll_seconds: float,
        pause_free_bytes: int = 0,
    ) -> None:
        self._monitor = monitor
        self._service = service
        self._budget = budget_bytes
        self._pause_free = pause_free_bytes
        self._poll = poll_seconds
        self._paused = False

    @property
    def budget_bytes(self) -> int:
        return self._budget

    def used_bytes(self) -> int:
        """This service's bytes at the last reading (0 before the first)."""
        reading = self._monitor.reading
        return 0 if reading is None else reading.of(self._service)

    def over(self) -> bool:
        return self._why_closed() is not None

    def _why_closed(self) -> str | None:
        reading = self._monitor.reading
        if reading is None:
            return None
        if reading.of(self._service) > self._budget:
            return "temporary space over its budget"
        if self._pause_free and self._free_now(reading) < self._pause_free:
            return "disk holding the temporary space nearly full"
        return None

    def _free_now(self, reading: TempUsage) -> int:
        """The disk's free bytes now, or at the last reading if it cannot say."""
        try:
            return free_bytes(self._monitor.tmp_dir)
        except OSError:
            return reading.free_bytes

    def is_open(self) -> bool:
        """Whether this service may take new work now."""
        return not self.over()

    async def wait_open(self) -> None:
        """Return once this service may take new work."""
        why = self._why_closed()
        if why is None:
            return
        if not self._paused:
            self._paused = True
            log.warning("%s %s; not taking new work", self._service, why)
        while self.over():
            await asyncio.sleep(self._poll)
        if self._paused:
            self._paused = False
            log.info("%s temporary space usable again; taking work", self._service)


class TempKeeper:
    """A service's housekeeping of the temporary space: a sweep at start and
    every ``sweep_seconds``, a usage reading every ``measure_seconds``."""

    def __init__(self, tmp_dir: Path, settings: TempSpaceSettings, *, service: str) -> None:
        self._tmp_dir = tmp_dir
        self._settings = settings
        self.monitor = TempSpaceMonitor(tmp_dir, interval_seconds=settings.measure_seconds)
        self.budget = TempBudget(
            self.monitor,
            service=service,
            budget_bytes=settings.budget_bytes,
            poll_seconds=settings.measure_seconds,
            pause_free_bytes=settings.pause_free_bytes,
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Sweep and take a first reading, then keep doing both in the background."""
        await asyncio.to_thread(self.sweep)
        await self.monitor.refresh()
        self._tasks = [
            asyncio.create_task(self.monitor.run(), name="temp-monitor"),
            asyncio.create_task(self._sweep_forever(), name="temp-sweeper"),
        ]

    def sweep(self) -> int:
        removed = sweep_leftovers(self._tmp_dir, stale_seconds=self._settings.stale_seconds)
        if removed:
            log.info("swept %d left-over temporary entries", removed)
        return removed

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.sweep_seconds)
            try:
                await asyncio.to_thread(self.sweep)
            except OSError as error:
                log.warning("temporary space not swept (%s)", type(error).__name__)

    def close(self) -> None:
        """Stop the background tasks (for synchronous shutdown hooks)."""
        for task in self._tasks:
            task.cancel()

    async def stop(self) -> None:
        self.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
