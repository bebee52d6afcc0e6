"""Free loopback ports for the embedded stack and tests.

Ports are drawn below the kernel's ephemeral range (32768 and up on Linux),
so that a port chosen here is not taken, between the check and the bind, by
an outgoing connection of some other process. A port is not handed out twice
by one process until ``RECENT`` others have been (a stack asks for a dozen at
once, before any of them is bound).
"""

from __future__ import annotations

import random
import socket
from collections import deque

__all__ = ["free_port"]

LOW, HIGH = 20000, 32767
ATTEMPTS = 200
RECENT = 2000

_recent: deque[int] = deque(maxlen=RECENT)


def free_port() -> int:
    for _ in range(ATTEMPTS):
        port = random.randint(LOW, HIGH)
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
