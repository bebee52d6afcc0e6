"""Temporary space: who owns each entry under the blob store's ``.tmp``.

Every temporary file or attempt directory is named
``<service>.<host>.<pid>.<kind>-<random>`` so that its owner can be told
from its name: usage is counted per stage, and an entry whose process is gone
(same host, pid no longer running) is left over and may be swept.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TempOwner", "temp_prefix", "owner_of", "owner_alive", "leftover_entries"]

_HOST = socket.gethostname().replace(".", "_")[:63] or "host"


@dataclass(frozen=True)
class TempOwner:
    service: str
    host: str
    pid: int


def temp_prefix(service: str, kind: str) -> str:
    """The name prefix for a temporary entry made by this process."""
    return f"{service}.{_HOST}.{os.getpid()}.{kind}-"


def owner_of(path: Path) -> TempOwner | None:
    """The owner encoded in an entry's name, or None for a name Quire did not make."""
    parts = path.name.split(".", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return TempOwner(service=parts[0], host=parts[1], pid=int(parts[2]))


def _pid_running(pid: int) -> bool:
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
        return _pid_running(owner.pid)
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
