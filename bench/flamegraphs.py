"""Flame graphs of running Quire processes, one per process kind (``make profile``).

py-spy samples each service's main process and its sandbox workers
(``--subprocesses``) from outside, at a low rate and without pausing them
(``--nonblocking``), while the bench runs; when the block ends each recorder
is told to stop (SIGINT) and writes ``<kind>.svg``. Nothing is imported into
the services and nothing they do changes. Needs the right to trace the
processes (root, or ``kernel.yama.ptrace_scope`` 0).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["recording"]

RATE = 50
"""Samples per second: enough for where the time goes, little enough to
leave the figures the bench prints about the same."""
STOP_SECONDS = 60.0


def _py_spy() -> str:
    return str(Path(sys.executable).with_name("py-spy"))


@contextmanager
def recording(
    kinds: Mapping[int, str],
    folder: Path,
    *,
    collapsed: bool = False,
    gil: bool = False,
    rate: int = RATE,
) -> Iterator[None]:
    """Record every pid of ``kinds`` (pid -> process kind) into
    ``folder/<kind>.svg`` for as long as the block runs; ``collapsed`` writes
    ``<kind>.txt`` instead, one stack per line with its sample count (what
    flamegraph tools and a quick ``sort -k2`` read). ``gil`` samples only the
    thread holding the interpreter lock: Python's own CPU, without threads
    that wait (a pool's idle workers, the event loop's ``select``); ``rate``
    is samples per second."""
    fmt, suffix = ("raw", "txt") if collapsed else ("flamegraph", "svg")
    folder.mkdir(parents=True, exist_ok=True)
    recorders = [
        subprocess.Popen(
            [
                _py_spy(),
                "record",
                "--pid",
                str(pid),
                "--subprocesses",
                "--nonblocking",
                "--rate",
                str(rate),
                *(["--gil"] if gil else []),
                "--format",
                fmt,
                "--output",
                str(folder / f"{kind}.{suffix}"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for pid, kind in kinds.items()
    ]
    try:
        yield
    finally:
        for recorder in recorders:
            if recorder.poll() is None:
                os.kill(recorder.pid, signal.SIGINT)
        for recorder in recorders:
            try:
                recorder.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                recorder.kill()
                recorder.wait()
