"""The load harness (bench/load, ``make load``) runs its tiny profile end to
end and writes a report with one row per workload class, plus the plots.

The harness starts its own stack, in the process it runs in: the test is
marked ``stack`` so that the unit tier never runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
CLASSES = ("contract", "lease", "scan", "invoice", "malformed")


def test_tiny_load_profile_writes_a_report_per_class(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    env = {**os.environ, "LOAD_PROFILE": "tiny", "LOAD_REPORT_DIR": str(report_dir)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.load.main"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in ("report.md", "results.json", "queue_age.png", "latency_by_class.png"):
        assert (report_dir / name).stat().st_size > 0, name
    report = (report_dir / "report.md").read_text()
    per_class = report.split("## Per class", 1)[1].split("###", 1)[0]
    rows = [line for line in per_class.splitlines() if line.startswith("| ")]
    for cls in CLASSES:
        assert sum(1 for row in rows if row.startswith(f"| {cls} |")) == 1, cls
    assert any("all classes (blended)" in row for row in rows)
    assert "## Capacity worksheet" in report
    assert "PASS" in report or "FAIL" in report
