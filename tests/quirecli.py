"""The ``quire`` command as a user runs it: a separate process, its output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["QUIRE", "ROOT", "run_quire"]

ROOT = Path(__file__).resolve().parent.parent
QUIRE = [sys.executable, "-m", "quire.cli.main"]


def run_quire(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*QUIRE, "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
