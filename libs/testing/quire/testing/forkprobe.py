"""A stand-in service for the zygote's tests (``quire.stack.zygote``): run as
a module, it writes what it sees of its process to ``FORKPROBE_FILE`` as
JSON, prints a line, and exits with ``FORKPROBE_EXIT`` (or, when that is
``wait``, waits until it is killed)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def main() -> None:
    facts = {
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "cwd": os.getcwd(),
        "argv0": sys.argv[0],
        "name": __name__,
        "env": dict(os.environ),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    }
    print("probe ran")
    # Whole or not at all: the test reads the file as soon as it is there.
    target = Path(os.environ["FORKPROBE_FILE"])
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(json.dumps(facts))
    os.replace(partial, target)
    if os.environ["FORKPROBE_EXIT"] == "wait":
        while True:  # until killed: a signal it answers (a stack dump) wakes ``pause``
            signal.pause()
    sys.exit(int(os.environ["FORKPROBE_EXIT"]))


if __name__ == "__main__":
    main()
