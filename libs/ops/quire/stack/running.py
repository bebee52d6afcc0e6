"""Whether the embedded stack of a data directory is running, asked without
starting, locking or writing anything (``quire check``, ``quire retention``).

``quire up`` holds ``stack.lock`` for the life of the stack
(``quire.stack.datadirlock``): a lock someone holds says it runs, a lock
no one holds that it stopped, whatever ports ``stack.json`` names (another
stack may have taken them since). A data directory without that file (laid
out before the lock existed) is judged by its endpoints: running if any
accepts a connection. Without ``stack.json`` there is nothing to tell.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from quire.stack.datadirlock import LOCK_FILE
from quire.stack.info import STACK_FILE

__all__ = ["stack_running"]

PROBE_TIMEOUT_SECONDS = 0.5


def _endpoint_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_SECONDS):
            return True
    except (OSError, ValueError):
        return False


def _lock_held(path: Path) -> bool | None:
    """Whether a process holds the stack lock at ``path``; None without the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock, if it was taken
    return False


def stack_running(data_dir: Path) -> bool | None:
    """True if the stack in ``data_dir`` runs, False if it does not, None
    when there is no ``stack.json`` to tell (a cluster, say)."""
    try:
        info = json.loads((data_dir / STACK_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    held = _lock_held(data_dir / LOCK_FILE)
    if held is not None:
        return held
    endpoints = info.get("endpoints", {}) if isinstance(info, dict) else {}
    return any(_endpoint_open(str(address)) for address in endpoints.values())
