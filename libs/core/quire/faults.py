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
A service reads both once, when it starts (``configure``, called by
``quire.runtime.run_service``); the fault directory's files are looked at
each time a point is reached, so a test can arm one while the stack runs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["configure", "fault_point", "arm", "fired"]


@dataclass(frozen=True)
class _Armed:
    fault_dir: str
    entries: tuple[str, ...]


_armed: _Armed | None = None
"""This process's fault settings; None (the production case): no fault point fires."""


def configure(env: Mapping[str, str]) -> None:
    """Read ``QUIRE_FAULTS`` and ``QUIRE_FAULTS_DIR`` from the process's
    environment, once, at its start."""
    global _armed
    fault_dir = env.get("QUIRE_FAULTS_DIR", "")
    faults = env.get("QUIRE_FAULTS", "")
    _armed = (
        _Armed(fault_dir, tuple(faults.split(",")) if faults else ())
        if fault_dir or faults
        else None
    )


def fault_point(name: str) -> None:
    armed = _armed
    if armed is None:
        return
    fault_dir, entries = armed.fault_dir, armed.entries
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
