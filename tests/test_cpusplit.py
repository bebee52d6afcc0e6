"""``BENCH_PERF=1 make bench``'s splitter (bench/cpusplit.py): perf's samples
charged to the process kind of their pid and to the code they were in, told
by the shared object; and on this machine, a real recording of a process
busy in the interpreter shows it there."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from cpusplit import category, report, sampling, script_lines, split  # noqa: E402

LINES = [
    " 101/101   7efed18bb344 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)",
    " 101/105   ffffffff815fe9ed do_fsync ([kernel.kallsyms])",
    " 101/105   7f4c450ff04a sqlite3VdbeExec (/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6)",
    " 202/202   7f3073c6d2f0 [unknown] (/venv/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so)",
    " 202/202   7f3073c6d2f0 upb_Decode (/venv/google/_upb/_message.abi3.so)",
    " 303/303   4a1b2c runtime.mallocgc (/venv/bin/nats-server)",
    " 404/404   7f0000 something (/opt/unknown.so)",
    "not a sample line",
]


def test_each_sample_goes_to_its_process_kind_and_its_code() -> None:
    found = split(LINES, {101: "audit", 202: "admission", 303: "nats-server"})
    assert found == {
        "audit": Counter({"interpreter": 1, "kernel": 1, "sqlite": 1}),
        "admission": Counter({"grpc": 1, "protobuf": 1}),
        "nats-server": Counter({"nats-server": 1}),
    }, "a pid no kind names (404) is left out"
    assert category("/opt/unknown.so") == "other"
    assert category("/lib/x86_64-linux-gnu/libc.so.6") == "libc"
    assert category("/venv/cryptography/hazmat/bindings/_rust.abi3.so") == "crypto"


def test_the_table_shares_each_kinds_cpu_by_its_samples() -> None:
    found = {"audit": Counter({"interpreter": 3, "kernel": 1})}
    header, row = report(found, {"audit": 8.0})
    assert header.split()[:2] == ["kind", "ms/job"]
    assert "interpreter" in header and "kernel" in header and "sqlite" not in header
    cells = row.split()
    assert cells[0] == "audit" and float(cells[1]) == 8.0
    by_name = dict(zip(header.split()[2:], map(float, cells[2:]), strict=True))
    assert by_name == {"kernel": 2.0, "interpreter": 6.0}


BUSY = """
import time
end = time.monotonic() + 30
while time.monotonic() < end:
    sum(range(1000))
"""


def _perf_samples_here() -> bool:
    perf = shutil.which("perf")
    if perf is None:
        return False
    probe = subprocess.run(
        [perf, "stat", "--all-cpus", "--", "true"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _perf_samples_here(), reason="perf cannot sample the machine here")
def test_a_process_busy_in_python_is_mostly_interpreter(tmp_path: Path) -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        time.sleep(0.5)
        with sampling(tmp_path) as data:
            time.sleep(2.5)
    finally:
        busy.kill()
        busy.wait()
    assert data is not None
    found = split(script_lines(data), {busy.pid: "busy"})
    samples = found["busy"]
    assert sum(samples.values()) > 10, "samples were taken (199 a second, less perf's start)"
    assert samples["interpreter"] > 0.5 * sum(samples.values()), samples
