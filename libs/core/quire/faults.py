"""Fault points for the fault-injection tests: a process can be told to
SIGKILL itself at a named step.

Two ways to arm one, both inert unless the test environment sets them:

- ``QUIRE_FAULTS`` lists ``name`` entries at start (``name:always`` fires
  every time); ``QUIRE_FAULTS_DIR`` records that a one-time fault fired, so
  the restarted process runs on.
- ``arm(fault_dir, name)`` while the stack runs: the first process to reach
  the point renames ``<name>.armed`` to ``<name>.fired`` (atomic, so exactly
  one process fires) and dies.

In production neither variable is set and ``fault_point`` does nothing.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["fault_point", "arm", "fired"]


def fault_point(name: str) -> None:
    fault_dir = os.environ.get("QUIRE_FAULTS_DIR", "")
    faults = os.environ.get("QUIRE_FAULTS", "")
    if not fault_dir and not faults:
        return
    entries = faults.split(",") if faults else []
    if f"{name}:always" in entries:
        _die()
    if not fault_dir:
        return
    directory = Path(fault_dir)
    try:
        os.rename(directory / f"{name}.armed", directory / f"{name}.fired")
    except FileNotFoundError:
        pass  # not armed at run time
    else:
        _die()
    if name not in entries:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / f"{name}.fired", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # already fired once
    os.close(fd)
    _die()


def arm(fault_dir: Path, name: str) -> None:
    """Arm ``name`` to fire once in whichever process reaches it first."""
    fault_dir.mkdir(parents=True, exist_ok=True)
    (fault_dir / f"{name}.fired").unlink(missing_ok=True)
    (fault_dir / f"{name}.armed").touch()


def fired(fault_dir: Path, name: str) -> bool:
    return (fault_dir / f"{name}.fired").exists()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
