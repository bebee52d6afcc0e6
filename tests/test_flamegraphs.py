"""``make profile``'s recorder (bench/flamegraphs.py): py-spy samples a running
process from outside and writes a flame graph naming where it spent its
time, and stops when the block ends."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from flamegraphs import recording  # noqa: E402

BUSY = """
import time
def quire_profiling_busy_loop():
    end = time.monotonic() + 30
    while time.monotonic() < end:
        sum(range(1000))
quire_profiling_busy_loop()
"""


def test_a_running_process_is_drawn_as_a_flame_graph(tmp_path: Path) -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        time.sleep(0.5)  # the interpreter is up before it is traced
        with recording({busy.pid: "busy"}, tmp_path):
            time.sleep(1.5)
    finally:
        busy.kill()
        busy.wait()
    graph = (tmp_path / "busy.svg").read_text()
    assert graph.lstrip().startswith("<?xml") or "<svg" in graph[:500]
    assert "quire_profiling_busy_loop" in graph, "the sampled function is in the graph"
