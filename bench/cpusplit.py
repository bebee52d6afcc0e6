"""CPU by code, per process kind (``BENCH_PERF=1 make bench``).

``perf`` samples the whole machine while the bench's throughput phase runs.
Each sample is charged to the process kind its pid belongs to (the bench's
sampler knows each service, nats-server and every sandbox worker) and to the
code it was in, told by its shared object: the Python interpreter, the
kernel (system calls, the network stack, file systems), SQLite, gRPC's core,
uvloop, protobuf, cryptography, the C library (malloc, memcpy), qpdf,
nats-server's own Go code. A large interpreter share is Python code spread
over the work; a large kernel share is system calls. Nothing is imported
into the services. Needs ``perf`` (Debian's ``linux-perf``) and the right to
sample the whole machine (root, or ``kernel.perf_event_paranoid`` below 1);
without them the bench says so and goes on.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CATEGORIES", "category", "report", "sampling", "split"]

RATE = 199
"""Samples per second on each core: off the beat of any timer in the stack."""
STOP_SECONDS = 60.0
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kernel", ("[kernel", "vmlinux")),
    ("interpreter", ("libpython", "/python3")),
    ("sqlite", ("sqlite",)),
    ("grpc", ("cygrpc",)),
    ("uvloop", ("uvloop", "loop.cpython")),
    ("protobuf", ("_upb", "_message.", "protobuf")),
    ("crypto", ("libcrypto", "_rust.abi3", "_openssl", "libssl")),
    ("qpdf", ("libqpdf", "pikepdf")),
    ("libc", ("libc.so", "libc-", "libm.so", "ld-linux", "libstdc++", "libgcc")),
    ("nats-server", ("nats-server",)),
)
"""Each category and the pieces of a shared object's path that name it, in
the order they are tried."""
_LINE = re.compile(r"^\s*(\d+)/\d+\s+\S+\s+.*\((?P<dso>[^()]*)\)\s*$")


def category(dso: str) -> str:
    """What code a shared object's path (as ``perf script`` prints it) is."""
    for name, marks in CATEGORIES:
        if any(mark in dso for mark in marks):
            return name
    return "other"


def split(lines: Iterable[str], kinds: Mapping[int, str]) -> dict[str, Counter[str]]:
    """Samples by process kind, then by code category, from ``perf script -F
    pid,tid,ip,sym,dso`` lines; a pid no kind names is left out."""
    found: dict[str, Counter[str]] = {}
    for line in lines:
        match = _LINE.match(line)
        if match is None:
            continue
        kind = kinds.get(int(match.group(1)))
        if kind is not None:
            found.setdefault(kind, Counter())[category(match.group("dso"))] += 1
    return found


def report(found: Mapping[str, Counter[str]], cpu_ms_per_job: Mapping[str, float]) -> list[str]:
    """A table: each process kind's CPU per job split by code, in ms per job
    (each kind's measured CPU shared out by its samples)."""
    shown = [name for name, _marks in CATEGORIES if name != "nats-server"]
    shown += ["nats-server", "other"]
    used = [name for name in shown if any(found[kind][name] for kind in found)]
    lines = [f"{'kind':26s}{'ms/job':>8s}" + "".join(f"{name:>13s}" for name in used)]
    for kind in sorted(found, key=lambda k: -cpu_ms_per_job.get(k, 0.0)):
        samples = sum(found[kind].values())
        ms = cpu_ms_per_job.get(kind, 0.0)
        if not samples or not ms:
            continue
        cells = "".join(f"{ms * found[kind][name] / samples:13.2f}" for name in used)
        lines.append(f"{kind:26s}{ms:8.1f}{cells}")
    return lines


def _perf() -> str | None:
    return shutil.which("perf")


@contextmanager
def sampling(folder: Path, *, rate: int = RATE) -> Iterator[Path | None]:
    """Sample the whole machine while the block runs; yields where the
    samples will be (None when ``perf`` cannot run here). Read them with
    ``script_lines`` once the block has ended."""
    perf = _perf()
    if perf is None:
        yield None
        return
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "perf.data"
    recorder = subprocess.Popen(
        [perf, "record", "--all-cpus", "--freq", str(rate), "--output", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield data
    finally:
        recorder.send_signal(signal.SIGINT)
        try:
            recorder.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()


def script_lines(data: Path) -> Iterator[str]:
    """The samples of ``data`` as ``perf script`` prints them (pid, ip,
    symbol, shared object); nothing when the recording failed."""
    perf = _perf()
    if perf is None or not data.is_file() or not os.path.getsize(data):
        return
    with subprocess.Popen(
        [perf, "script", "--input", str(data), "--fields", "pid,tid,ip,sym,dso"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        errors="replace",
    ) as reader:
        assert reader.stdout is not None
        yield from reader.stdout
