"""A process's wall clock, skewed by a test while the process runs
(issue 42): Debian's libfaketime, preloaded into the process, reads the
offset from a file on every call, so writing the file moves the clock of a
running process ahead or behind, and ``0`` puts it back.

Only the wall clock moves (``CLOCK_REALTIME``: ``time.time()``,
``datetime.now()``, file times Quire reads back); the monotonic clock stays
the machine's (``DONT_FAKE_MONOTONIC``), as a host whose clock is set wrong
still counts seconds correctly. Every thread and child process of the skewed
process sees the same offset (the multi-threaded build of the library, and
the variables are inherited).

A process forked from a zygote that was started without the library never
loads it: ``quire.stack.supervisor.Stack`` starts a service whose
environment adds ``LD_PRELOAD`` with ``python -m`` for that reason.

    clock = SkewedClock(tmp_path / "audit.clock")
    stack = Stack(directory, service_env={"audit": clock.env()})
    clock.set(-300)   # five minutes behind, from the next call on
    clock.set(0)
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FAKETIME_LIBRARIES", "SkewedClock", "faketime_library"]

FAKETIME_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
)
"""Where Debian's ``libfaketime`` package puts its multi-threaded build."""


def faketime_library() -> Path:
    """The multi-threaded libfaketime; FileNotFoundError naming the Debian
    package when it is not installed (``make system-deps`` installs it)."""
    for candidate in FAKETIME_LIBRARIES:
        if os.path.exists(candidate):
            return Path(candidate)
    raise FileNotFoundError("libfaketime is not installed (Debian package faketime)")


class SkewedClock:
    """The offset of one process's wall clock, kept in ``path``."""

    def __init__(self, path: Path, seconds: float = 0.0) -> None:
        self.path = path
        self.library = faketime_library()
        self.seconds = 0.0
        self.set(seconds)

    def env(self) -> dict[str, str]:
        """What the skewed process is started with."""
        return {
            "LD_PRELOAD": str(self.library),
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "DONT_FAKE_MONOTONIC": "1",
            # A crash inside the preloaded library leaves a trace in the log.
            "PYTHONFAULTHANDLER": "1",
        }

    def set(self, seconds: float) -> None:
        """From the next clock reading on, ``seconds`` ahead (negative:
        behind) of the machine's clock. Written whole and renamed into
        place, so a reading never sees half an offset."""
        scratch = self.path.with_name(self.path.name + ".next")
        scratch.write_text(f"{round(seconds):+d}\n")
        os.replace(scratch, self.path)
        self.seconds = float(round(seconds))
