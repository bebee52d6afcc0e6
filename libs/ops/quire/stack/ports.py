"""Free loopback ports for the embedded stack and tests.

Ports are drawn below the kernel's ephemeral range (32768 and up on Linux),
so that a port chosen here is not taken, between the check and the bind, by
an outgoing connection of some other process. A port is not handed out twice
by one process until ``RECENT`` others have been (a stack asks for a dozen at
once, before any of them is bound). ``QUIRE_PORT_RANGE`` ("LOW-HIGH") narrows
the range, so that processes starting stacks side by side (the test suite's
workers) draw from ranges of their own and cannot pick the same port between
one's check and its bind.
"""

from __future__ import annotations

import os
import random
import socket
from collections import deque

__all__ = ["free_port", "port_range"]

LOW, HIGH = 20000, 32767
ATTEMPTS = 200
RECENT = 2000

_recent: deque[int] = deque(maxlen=RECENT)


def port_range() -> tuple[int, int]:
    """``QUIRE_PORT_RANGE`` when it names a range inside LOW..HIGH, else LOW..HIGH."""
    low, _, high = os.environ.get("QUIRE_PORT_RANGE", "").partition("-")
    if low.isdigit() and high.isdigit() and LOW <= int(low) < int(high) <= HIGH:
        return int(low), int(high)
    return LOW, HIGH


def free_port() -> int:
    low, high = port_range()
    for _ in range(ATTEMPTS):
        port = random.randint(low, high)
        if port in _recent:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            _recent.append(port)
            return port
    raise RuntimeError("no free loopback port found")
