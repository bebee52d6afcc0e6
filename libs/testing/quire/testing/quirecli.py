"""The ``quire`` command as a user runs it: a separate process, its output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["QUIRE", "ROOT", "run_quire"]

ROOT = Path(__file__).resolve().parents[4]
"""The repository (``libs/testing/quire/testing/`` is four folders down): the
CLI runs from there, as a user types it in a checkout."""
QUIRE = [sys.executable, "-m", "quire.cli.main"]


def run_quire(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*QUIRE, "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
