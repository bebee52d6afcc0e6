"""The ``quire`` command as a user runs it: a separate process, its output captured."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["QUIRE", "ROOT", "read_until", "run_quire"]

ROOT = Path(__file__).resolve().parents[4]
"""The repository (``libs/testing/quire/testing/`` is four folders down): the
CLI runs from there, as a user types it in a checkout."""
QUIRE = [sys.executable, "-m", "quire.cli.main"]


def run_quire(
    data_dir: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``quire --data-dir DATA_DIR ARGS...``; ``env`` adds to (or, with "",
    blanks) this process's environment, as a user's shell would."""
    return subprocess.run(
        [*QUIRE, "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
    )


def read_until(process: subprocess.Popen[str], marker: str, timeout: float) -> str:
    """What a long-running command (``quire up``) printed, up to the line with
    ``marker``; fails with everything printed so far if it never comes."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"{marker!r} not printed; output so far:\n{''.join(seen)}")
