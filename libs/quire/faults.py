"""Fault points for the fault-injection tests: a process can be told to
SIGKILL itself at a named step, once.

``QUIRE_FAULTS`` lists ``name`` entries (``name:always`` to fire every time);
``QUIRE_FAULTS_DIR`` is where a marker records that a one-time fault fired, so
the restarted process runs on. Unset (production), ``fault_point`` does nothing.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["fault_point"]


def fault_point(name: str) -> None:
    faults = os.environ.get("QUIRE_FAULTS", "")
    if not faults:
        return
    entries = faults.split(",")
    if f"{name}:always" in entries:
        os.kill(os.getpid(), signal.SIGKILL)
    if name not in entries:
        return
    marker = Path(os.environ.get("QUIRE_FAULTS_DIR", "/nonexistent")) / f"{name}.fired"
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # already fired once
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
